// wt::FanOutClient: one trainer-side client over several receivers. Each replica gets its own
// rank_offset; the calls reach all replicas at once (a collective's workers only answer once all
// have joined); a failure names its replica and keeps its code.
#include <wt/services/fan_out_client.hpp>

#include "support/recording_client.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <mutex>

using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace wt {
namespace {

TEST(FanOutClient, EachReplicaGetsItsOwnRankOffset) {
  test::RecordingClient a, b, c;
  FanOutClient fan({{&a, 2, "a"}, {&b, 1, "b"}, {&c, 4, "c"}});
  EXPECT_EQ(fan.world_size(), 7);
  fan.init_weight_transfer_engine(R"({"master_port": 29500, "rank_offset": 1, "world_size": 8})");
  auto offset = [](const test::RecordingClient& r) {
    return nlohmann::json::parse(r.calls().at(0).payload).at("rank_offset").get<int>();
  };
  EXPECT_EQ(offset(a), 1);
  EXPECT_EQ(offset(b), 3);
  EXPECT_EQ(offset(c), 4);
  EXPECT_EQ(nlohmann::json::parse(c.calls().at(0).payload).at("master_port"), 29500);
}

// Keys for one rank only (<wt/sdk/rank_keys.hpp>): each replica is given the rank_keys entries of
// its own ranks and no other, a single replica too.
TEST(FanOutClient, EachReplicaIsGivenOnlyTheKeysOfItsRanks) {
  test::RecordingClient a, b, c;
  FanOutClient fan({{&a, 2, "a"}, {&b, 1, "b"}, {&c, 4, "c"}});
  nlohmann::json info = {
      {"rank_offset", 1}, {"world_size", 8}, {"rank_keys", nlohmann::json::object()}};
  for (int o = 1; o <= 7; ++o) info["rank_keys"][std::to_string(o)] = "key of " + std::to_string(o);
  info["rank_keys"]["9"] = "a rank nobody has";
  fan.init_weight_transfer_engine(info.dump());
  auto keys = [](const test::RecordingClient& r) {
    const auto sent = nlohmann::json::parse(r.calls().at(0).payload);
    std::vector<std::string> out;
    for (const auto& [o, k] : sent.at("rank_keys").items())
      out.push_back(o + "=" + k.get<std::string>());
    return out;
  };
  EXPECT_THAT(keys(a), ElementsAre("1=key of 1", "2=key of 2"));
  EXPECT_THAT(keys(b), ElementsAre("3=key of 3"));
  EXPECT_THAT(keys(c), ElementsAre("4=key of 4", "5=key of 5", "6=key of 6", "7=key of 7"));

  test::RecordingClient only;
  FanOutClient one({{&only, 2, "only"}});
  info["rank_offset"] = 3;
  one.init_weight_transfer_engine(info.dump());
  EXPECT_THAT(keys(only), ElementsAre("3=key of 3", "4=key of 4"));
}

TEST(FanOutClient, InitInfoWithoutRankOffsetIsSentAsItIs) {
  test::RecordingClient a, b;
  FanOutClient fan({{&a, 1, "a"}, {&b, 1, "b"}});
  const std::string text = R"({"packed":true,  "x": [1, 2]})";
  fan.init_weight_transfer_engine(text);
  EXPECT_EQ(a.calls().at(0).payload, text);
  EXPECT_EQ(b.calls().at(0).payload, text);
}

// Each replica's call blocks until every replica's call has arrived, as workers joining one
// group do: called one after another, this would never finish (the barrier gives up after 5 s).
class BarrierClient : public test::RecordingClient {
 public:
  BarrierClient(std::mutex& mu, std::condition_variable& cv, int& arrived, int expected)
      : mu_(mu), cv_(cv), arrived_(arrived), expected_(expected) {}
  void update_weights(std::string_view j) override {
    test::RecordingClient::update_weights(j);
    std::unique_lock<std::mutex> l(mu_);
    ++arrived_;
    cv_.notify_all();
    if (!cv_.wait_for(l, std::chrono::seconds(5), [&] { return arrived_ == expected_; }))
      throw Error(WT_ERR_TIMEOUT, "the other replicas never arrived");
  }

 private:
  std::mutex& mu_;
  std::condition_variable& cv_;
  int& arrived_;
  int expected_;
};

TEST(FanOutClient, CallsReachEveryReplicaAtOnce) {
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  BarrierClient a(mu, cv, arrived, 3), b(mu, cv, arrived, 3), c(mu, cv, arrived, 3);
  FanOutClient fan({{&a, 1, "a"}, {&b, 1, "b"}, {&c, 1, "c"}});
  fan.update_weights(R"({"names": []})");
  EXPECT_EQ(arrived, 3);
}

// A RecordingClient that also records end_weight_update and its reason.
class EndingClient : public test::RecordingClient {
 public:
  void end_weight_update(std::string_view reason) override {
    std::lock_guard<std::mutex> l(mu_);
    ended_.emplace_back(reason);
  }
  std::vector<std::string> ended() const {
    std::lock_guard<std::mutex> l(mu_);
    return ended_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> ended_;
};

TEST(FanOutClient, AFailedStartEndsTheRoundOnEveryReplicaThatStartedIt) {
  EndingClient a, b, c;
  b.fail_next("start", "a weight update is already active");
  FanOutClient fan({{&a, 1, "http://a:8000"}, {&b, 1, "http://b:8000"}, {&c, 1, "http://c:8000"}});
  EXPECT_THROW(fan.start_weight_update(), Error);
  const std::string why =
      "start_weight_update failed on receiver 2 of 3 (http://b:8000): a weight update is "
      "already active";
  EXPECT_THAT(a.ended(), ElementsAre(why));
  EXPECT_TRUE(b.ended().empty());  // it never started the round
  EXPECT_THAT(c.ended(), ElementsAre(why));
}

TEST(FanOutClient, AFailureNamesItsReplicaAndEveryReplicaWasCalled) {
  test::RecordingClient a, b;
  b.fail_next("start", "a weight update is already active");
  FanOutClient fan({{&a, 1, "http://a:8000"}, {&b, 1, "http://b:8000"}});
  try {
    fan.start_weight_update();
    FAIL() << "a replica's refusal was lost";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_REMOTE);
    EXPECT_EQ(std::string(e.what()),
              "receiver 2 of 2 (http://b:8000): a weight update is already active");
  }
  // a started the round: it is ended (a client's default end is an update that ends it).
  EXPECT_THAT(a.methods(), ElementsAre("start", "update"));
  EXPECT_THAT(a.calls()[1].payload, HasSubstr("wt_end_weight_update"));
  EXPECT_THAT(b.methods(), ElementsAre("start"));
}

TEST(FanOutClient, OneReplicaKeepsItsOwnWords) {
  test::RecordingClient a;
  a.fail_next("finish", "no weight update is active");
  FanOutClient fan({{&a, 1, "a"}});
  try {
    fan.finish_weight_update("v1");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "no weight update is active");
  }
}

TEST(FanOutClient, BadReplicasAreRefused) {
  test::RecordingClient a;
  EXPECT_THROW(FanOutClient({}), Error);
  EXPECT_THROW(FanOutClient({{nullptr, 1, "x"}}), Error);
  EXPECT_THROW(FanOutClient({{&a, 0, "x"}}), Error);
}

}  // namespace
}  // namespace wt
