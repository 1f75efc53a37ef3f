// wt::EngineSession behind wt::HttpServer: vLLM's routes and session rules over an engine's own
// memory. A finished round reaches the engine's weights through commit() (bytes identical to the
// trainer's); a refused update ends the round with discard(), commits nothing and leaves the
// session ready for the next start; the session rules answer as `wt serve` does.
#include <wt/checksum.hpp>
#include <wt/dtype.hpp>
#include <wt/services/engine_session.hpp>
#include <wt/services/http_client.hpp>
#include <wt/services/http_server.hpp>
#include <wt/wt.hpp>

#include "support/model.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <mutex>

namespace wt {
namespace {

// Two buffers per parameter: a round writes `next`; commit() swaps it in.
class DoubleBuffered final : public EngineMemory {
 public:
  std::atomic<int> commits = 0, discards = 0;  // read by the test, written by a server thread

  std::optional<DLTensor> destination(const ParamMeta& p) override {
    std::lock_guard<std::mutex> l(mu_);
    Slot& s = slots_[p.name];
    std::size_t bytes = element_size(p.dtype);
    for (int64_t d : p.shape) bytes *= static_cast<std::size_t>(d);
    s.dtype = p.dtype;
    s.shape = p.shape;
    s.next.resize(bytes);
    s.live.resize(bytes);
    return DLTensor{s.next.data(),
                    {kDLCPU, 0},
                    static_cast<int32_t>(s.shape.size()),
                    s.dtype,
                    s.shape.data(),
                    nullptr,
                    0};
  }
  void written(const std::string& name) override { written_.push_back(name); }
  void load(std::span<const wt_tensor>) override {
    throw Error(WT_ERR_UNSUPPORTED, "every tensor has a destination here");
  }
  void commit() override {
    std::lock_guard<std::mutex> l(mu_);
    ++commits;
    for (const auto& n : written_) std::swap(slots_[n].live, slots_[n].next);
    written_.clear();
  }
  void discard() override {
    ++discards;
    written_.clear();
  }
  std::map<std::string, std::string> checksums() const override {
    std::lock_guard<std::mutex> l(mu_);
    std::map<std::string, std::string> out;
    for (const auto& [name, s] : slots_) out[name] = checksum_bytes(s.live.data(), s.live.size());
    return out;
  }

 private:
  struct Slot {
    DLDataType dtype{};
    std::vector<int64_t> shape;
    std::vector<unsigned char> live, next;
  };
  mutable std::mutex mu_;
  std::map<std::string, Slot> slots_;
  std::vector<std::string> written_;
};

TEST(EngineSession, RoundsReachTheEnginesMemoryAndARefusedOneLeavesItAsItWas) {
  DoubleBuffered memory;
  EngineSession session("ipc", memory);
  HttpServer server(session, HttpServer::Options{});
  server.start();
  HttpClient http(server.url());
  test::VectorSource source;
  test::fill_model(source, 2);
  auto trainer =
      trainer_init(InitInfo::from_object({{"backend", "ipc"}, {"rank", 0}}), http, &source);
  SendOptions v1;
  v1.weight_version = "v1";
  trainer->send_weights(v1);
  const auto committed = test::checksums_of(source);
  EXPECT_EQ(memory.commits, 1);
  EXPECT_EQ(http.weight_checksums(), committed);
  EXPECT_EQ(http.get("/weight_info")["weight_version"], "v1");

  // Session rules, answered as wt serve answers them.
  httplib::Client raw(server.url());
  auto r = raw.Post("/start_weight_update", "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = raw.Post("/start_weight_update", "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 409);
  EXPECT_NE(r->body.find("a weight update is already active"), std::string::npos) << r->body;
  // A refused update ends the round: discarded, nothing committed, the next start accepted.
  r = raw.Post("/update_weights", R"({"update_info": {"names": ["w"]}})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(memory.discards, 1);
  EXPECT_FALSE(http.get("/health")["update_active"].get<bool>());
  r = raw.Post("/finish_weight_update", "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 409);
  EXPECT_EQ(memory.commits, 1);
  EXPECT_EQ(http.weight_checksums(), committed);

  // The trainer syncs on: a changed model, committed whole.
  source.perturb(0);
  trainer->send_weights({});
  EXPECT_EQ(memory.commits, 2);
  EXPECT_EQ(http.weight_checksums(), test::checksums_of(source));
  EXPECT_NE(test::checksums_of(source), committed);
}

}  // namespace
}  // namespace wt
