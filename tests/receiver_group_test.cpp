// wt::ReceiverGroup, the reference receiver standing for a tensor-parallel group (`wt serve
// --tensor-parallel-size T`): rank k gets rank_offset + k; an update object reaches every rank, a
// list one element each; one rank's failure ends the others' updates at once and is the one
// reported, named; a round commits on every rank or on none; over HTTP, /get_world_size answers T
// and /weight_checksums has each rank's own.
#include <wt/error.hpp>
#include <wt/services/http_client.hpp>
#include <wt/services/http_server.hpp>
#include <wt/services/receiver_group.hpp>

#include "support/vector_source.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

using ::testing::HasSubstr;
using json = nlohmann::json;

namespace wt {
namespace {

// The test plugin's worker: "inline" loads float32 tensors, "fail" refuses the update,
// "fail_finish" fails the next finish, "block_until_abort" waits for abort, "report_rank_offset"
// loads the rank offset it was given as tensor "rank_offset".
std::unique_ptr<ReceiverGroup> group_of(int ranks) {
  ::setenv("WT_PLUGIN_PATH", WT_TEST_GOOD_DIR, 1);
  Receiver::Options o;
  o.backend = "testgood";
  return std::make_unique<ReceiverGroup>(o, ranks);
}

std::vector<float> floats_of(const Receiver& r, const std::string& name) {
  auto b = r.bytes_of(name);
  if (!b) return {};
  std::vector<float> v(b->size() / sizeof(float));
  std::memcpy(v.data(), b->data(), b->size());
  return v;
}

json inline_tensor(const std::string& name, std::vector<float> values) {
  return {{"inline", {{{"name", name}, {"values", values}}}}};
}

// Both ranks hold "w" = {1, 2} (rank 0) and {3, 4} (rank 1), committed as version "1".
void commit_first_round(ReceiverGroup& g) {
  g.init_weight_transfer_engine({{"rank_offset", 1}, {"world_size", 3}});
  g.start_weight_update();
  g.update_weights(json::array({inline_tensor("w", {1, 2}), inline_tensor("w", {3, 4})}));
  g.finish_weight_update("1");
}

TEST(ReceiverGroup, EachRankIsGivenTheDeploymentsRankOffsetPlusItsPlace) {
  auto g = group_of(3);
  EXPECT_EQ(g->world_size(), 3);
  g->init_weight_transfer_engine({{"rank_offset", 5}, {"world_size", 8}});
  g->start_weight_update();
  g->update_weights({{"report_rank_offset", true}});  // one object: every rank gets it
  g->finish_weight_update("v");
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(floats_of(g->rank(k), "rank_offset"), std::vector<float>{5.0f + k}) << "rank " << k;
    EXPECT_EQ(g->rank(k).weight_version(), "v");
  }
}

// Keys for one rank only (<wt/sdk/rank_keys.hpp>): each rank is given its own entry of the init
// info's rank_keys and no other, however many the trainer sent; a group of one too.
TEST(ReceiverGroup, EachRankIsGivenOnlyItsOwnRankKey) {
  for (int ranks : {3, 1}) {
    auto g = group_of(ranks);
    json keys = json::object();
    for (int o = 1; o <= 9; ++o) keys[std::to_string(o)] = std::string(64, 'a' + o);
    g->init_weight_transfer_engine({{"rank_offset", 5}, {"world_size", 10}, {"rank_keys", keys}});
    g->start_weight_update();
    g->update_weights({{"report_rank_offset", true}});
    g->finish_weight_update("v");
    for (int k = 0; k < ranks; ++k)
      EXPECT_EQ(floats_of(g->rank(k), "rank_keys"), std::vector<float>{5.0f + k})
          << ranks << " ranks, rank " << k;
  }
}

TEST(ReceiverGroup, AListGivesEachRankItsOwnPayloadAndMustHaveOnePerRank) {
  auto g = group_of(2);
  commit_first_round(*g);
  EXPECT_EQ(floats_of(g->rank(0), "w"), (std::vector<float>{1, 2}));
  EXPECT_EQ(floats_of(g->rank(1), "w"), (std::vector<float>{3, 4}));
  const auto sums = g->checksums_by_rank();
  ASSERT_EQ(sums.size(), 2u);
  EXPECT_NE(sums[0].at("w"), sums[1].at("w")) << "each rank's checksums are of its own bytes";

  g->start_weight_update();
  try {
    g->update_weights(json::array({inline_tensor("w", {9, 9})}));
    FAIL() << "a list of 1 for 2 ranks was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr("a list of 1 per-worker payloads, but this receiver has 2"));
  }
  EXPECT_FALSE(g->session_active()) << "a refused update ends the session (vLLM's rule)";
  EXPECT_EQ(floats_of(g->rank(0), "w"), (std::vector<float>{1, 2}));
}

TEST(ReceiverGroup, OneRanksFailureEndsTheOthersAtOnceAndIsTheOneReported) {
  auto g = group_of(2);
  commit_first_round(*g);
  g->start_weight_update();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    // Rank 0 would wait forever for its bytes; rank 1 refuses its update.
    g->update_weights(json::array({{{"block_until_abort", true}}, {{"fail", "shape mismatch"}}}));
    FAIL() << "the update succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("tensor-parallel rank 1 of 2: "));
    EXPECT_THAT(e.what(), HasSubstr("shape mismatch"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_FALSE(g->session_active());
  EXPECT_EQ(floats_of(g->rank(0), "w"), (std::vector<float>{1, 2}));
  EXPECT_EQ(floats_of(g->rank(1), "w"), (std::vector<float>{3, 4}));
  // The group is usable again: the next round commits on both.
  g->start_weight_update();
  g->update_weights(inline_tensor("w", {5, 6}));
  g->finish_weight_update("2");
  EXPECT_EQ(floats_of(g->rank(0), "w"), (std::vector<float>{5, 6}));
  EXPECT_EQ(floats_of(g->rank(1), "w"), (std::vector<float>{5, 6}));
}

TEST(ReceiverGroup, ARoundCommitsOnEveryRankOrOnNone) {
  auto g = group_of(2);
  commit_first_round(*g);
  g->start_weight_update();
  // Both ranks receive; rank 1's engine then fails its finish.
  g->update_weights(
      json::array({inline_tensor("w", {7, 7}),
                   {{"inline", {{{"name", "w"}, {"values", {8, 8}}}}}, {"fail_finish", true}}}));
  try {
    g->finish_weight_update("2");
    FAIL() << "the finish succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_REMOTE) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("tensor-parallel rank 1 of 2: "));
  }
  EXPECT_FALSE(g->session_active());
  EXPECT_EQ(floats_of(g->rank(0), "w"), (std::vector<float>{1, 2})) << "rank 0 finished, yet "
                                                                       "must not commit alone";
  EXPECT_EQ(floats_of(g->rank(1), "w"), (std::vector<float>{3, 4}));
  EXPECT_EQ(g->weight_version(), "1");
  EXPECT_EQ(g->rank(0).rounds_finished(), 1u);
}

TEST(ReceiverGroup, OneRanksInitRefusalIsTheAnswerAtOnceAndStartIsRefusedUntilAnInitSucceeds) {
  auto g = group_of(2);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    // Rank 1 refuses; rank 0 would wait 3 s in its rendezvous.
    g->init_weight_transfer_engine(
        {{"rank_offset", 1}, {"fail_rank_offset", 2}, {"init_wait_ms", 3000}});
    FAIL() << "the init succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr("tensor-parallel rank 1 of 2: "));
    EXPECT_THAT(e.what(), HasSubstr("init refused at rank_offset 2"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1))
      << "answered at the first refusal, not when every rank's rendezvous ended";
  try {
    g->start_weight_update();
    FAIL() << "a start was taken after a failed init";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_STATE);
    EXPECT_THAT(e.what(), HasSubstr("init refused at rank_offset 2"));
  }
  commit_first_round(*g);  // a new init (after the old one's ranks are done) makes it usable
  EXPECT_EQ(floats_of(g->rank(1), "w"), (std::vector<float>{3, 4}));
}

TEST(ReceiverGroup, AFinishFailingOnRankZeroCommitsOnNoRank) {
  auto g = group_of(2);
  commit_first_round(*g);
  g->start_weight_update();
  g->update_weights(
      json::array({{{"inline", {{{"name", "w"}, {"values", {8, 8}}}}}, {"fail_finish", true}},
                   inline_tensor("w", {7, 7})}));
  EXPECT_THROW(g->finish_weight_update("2"), Error);
  EXPECT_FALSE(g->rank(1).session_active());
  EXPECT_EQ(floats_of(g->rank(0), "w"), (std::vector<float>{1, 2}));
  EXPECT_EQ(floats_of(g->rank(1), "w"), (std::vector<float>{3, 4})) << "rank 1 finished alone";
}

TEST(ReceiverGroup, EndingWithNoCallInFlightEndsEveryRanksSession) {
  auto g = group_of(3);
  g->init_weight_transfer_engine({{"rank_offset", 1}});
  g->start_weight_update();
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(g->rank(k).session_active());
  g->end_weight_update("the trainer gave up");
  for (int k = 0; k < 3; ++k) EXPECT_FALSE(g->rank(k).session_active()) << "rank " << k;
  g->start_weight_update();  // accepted again on every rank
  g->update_weights(inline_tensor("w", {1}));
  g->finish_weight_update("1");
  for (int k = 0; k < 3; ++k) EXPECT_EQ(floats_of(g->rank(k), "w"), std::vector<float>{1});
}

TEST(ReceiverGroup, SeveralRanksOnAGpuAreRefused) {
  Receiver::Options o;
  o.backend = "testgood";
  o.device = {kDLCUDA, 0};
  try {
    ReceiverGroup g(o, 2);
    FAIL() << "two ranks on one GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_UNSUPPORTED);
    EXPECT_THAT(e.what(), HasSubstr("one GPU per rank"));
  }
}

TEST(ReceiverGroup, EndingAnUpdateReachesEveryRankEvenWhileOneIsBlocked) {
  auto g = group_of(2);
  commit_first_round(*g);
  g->start_weight_update();
  std::atomic<wt_status> code{WT_OK};
  std::thread update([&] {
    try {
      // Only rank 1 blocks: the end must reach it, not only rank 0.
      g->update_weights(json::array({inline_tensor("w", {5, 5}), {{"block_until_abort", true}}}));
    } catch (const Error& e) {
      code = e.code();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = std::chrono::steady_clock::now();
  g->end_weight_update("the trainer gave up");
  update.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(code.load(), WT_ERR_ABORTED);
  EXPECT_FALSE(g->session_active());
  EXPECT_EQ(floats_of(g->rank(1), "w"), (std::vector<float>{3, 4}));
}

TEST(ReceiverGroup, RefusesABaseCheckpointAndBadSizes) {
  Receiver::Options o;
  o.backend = "testgood";
  EXPECT_THROW(ReceiverGroup(o, 0), Error);
  EXPECT_THROW(ReceiverGroup(o, ReceiverGroup::kMaxRanks + 1), Error);
  auto g = group_of(2);
  test::VectorSource base;
  base.add("w", {kDLFloat, 32, 1}, {4}, 1);
  try {
    g->load_base(base);
    FAIL() << "a group of 2 loaded whole tensors as its base";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_UNSUPPORTED);
    EXPECT_THAT(e.what(), HasSubstr("cannot load a base checkpoint"));
  }
  EXPECT_TRUE(g->rank(0).names().empty());
  try {
    g->init_weight_transfer_engine({{"rank_offset", "1"}});
    FAIL() << "a string rank_offset was taken";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("init_info.rank_offset must be an integer"));
  }
}

TEST(ReceiverGroup, OverHttpTheWorldSizeIsTheRanksAndTheChecksumsAreEachRanks) {
  auto g = group_of(2);
  commit_first_round(*g);
  HttpServer server(*g, HttpServer::Options{});
  server.start();
  HttpClient client(server.url());
  EXPECT_EQ(client.world_size(), 2);
  const auto by_rank = client.weight_checksums_by_rank();
  EXPECT_EQ(by_rank, g->checksums_by_rank());
  try {
    client.weight_checksums();  // a client that ignores ranks cannot verify a group wrongly
    FAIL() << "one map for two ranks";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("has 2 worker ranks"));
  }
  EXPECT_FALSE(client.get("/weight_checksums").contains("checksums"));
  server.stop();

  // A single receiver still answers "checksums" (and "ranks" with one element).
  Receiver one("testgood");
  HttpServer single(one, HttpServer::Options{});
  single.start();
  HttpClient c1(single.url());
  EXPECT_EQ(c1.world_size(), 1);
  EXPECT_TRUE(c1.weight_checksums().empty());
  EXPECT_EQ(c1.weight_checksums_by_rank().size(), 1u);
}

}  // namespace
}  // namespace wt
