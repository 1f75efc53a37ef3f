// nccl host-memory throughput (Gloo), packed, next to a bare Gloo broadcast (no wt frame) of the
// same bytes in the same chunks between the same two ranks, in one run. The trainer and a reference
// receiver run in this process (two threads, two Gloo ranks over loopback TCP), for two models: a
// few large tensors, and 2,000 small ones. After two warm-up rounds, packed, raw and unpacked
// rounds are interleaved; each figure is the median round. Prints GB/s, the ratio of packed to raw,
// and unpacked GB/s (one broadcast per tensor, into the receiver's memory). Then what the round
// digests cost (round_digests.hpp): how long XXH3-128 of a round's bytes takes alone (4 MiB blocks
// on two threads, in ms per GB), and the raw round again with both ends digesting as wt's do (the
// root while it sends, the receiver while the next chunk arrives), interleaved with the others:
// its time against the raw round's is the cost a round pays for its digests.
//
//   build/bin/wt_bench_nccl [--mib 256] [--rounds 9] [--buffer-mib 64]
#include "broadcast_pipeline.hpp"
#include "round_digests.hpp"
#include "support/free_port.hpp"
#include "tcp_store.hpp"

#include <wt/services/receiver.hpp>
#include <wt/wt.hpp>

#include <fmt/format.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <semaphore>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

using wt::test::free_port;

// `count` bfloat16 tensors of `bytes` each, filled once.
class Blocks : public wt::WeightSource {
 public:
  Blocks(std::size_t count, std::size_t bytes) : data_(count * bytes), bytes_(bytes) {
    for (std::size_t i = 0; i < data_.size(); ++i) data_[i] = static_cast<unsigned char>(i * 131);
    shape_ = {static_cast<int64_t>(bytes / 2)};
    for (std::size_t i = 0; i < count; ++i)
      meta_.push_back({fmt::format("layer.{}.weight", i), {kDLBfloat, 16, 1}, shape_});
  }
  const std::vector<wt::ParamMeta>& metadata() override { return meta_; }
  void begin() override { next_ = 0; }
  bool next(wt_tensor& out) override {
    if (next_ >= meta_.size()) return false;
    out.name = meta_[next_].name.c_str();
    out.tensor = DLTensor{data_.data() + next_ * bytes_,
                          {kDLCPU, 0},
                          1,
                          {kDLBfloat, 16, 1},
                          shape_.data(),
                          nullptr,
                          0};
    ++next_;
    return true;
  }
  void end() override {}
  std::size_t total() const { return data_.size(); }
  const unsigned char* data() const { return data_.data(); }

 private:
  std::vector<unsigned char> data_;
  std::size_t bytes_;
  std::vector<int64_t> shape_;
  std::vector<wt::ParamMeta> meta_;
  std::size_t next_ = 0;
};

// One wt trainer engine and its in-process receiver, kept for the whole run.
class WtSync {
 public:
  WtSync(Blocks& source, int64_t buffer, bool packed) : receiver_(options()), client_(receiver_) {
    auto info = wt::InitInfo::from_object({{"backend", "nccl"},
                                           {"master_address", "127.0.0.1"},
                                           {"master_port", free_port()},
                                           {"world_size", 2},
                                           {"rank", 0},
                                           {"packed", packed},
                                           {"packed_buffer_size_bytes", buffer}});
    engine_ = wt::trainer_init(info, client_, &source);
  }
  void round() { engine_->send_weights(); }

 private:
  static wt::Receiver::Options options() {
    wt::Receiver::Options ro;
    ro.backend = "nccl";
    return ro;
  }
  wt::Receiver receiver_;
  wt::InProcessClient client_;
  std::unique_ptr<wt::TrainerEngine> engine_;
};

// The same bytes, in vLLM's packed chunks, with nothing but Gloo broadcasts between two ranks
// (rank 1 on a thread of its own, into two buffers it rotates through wt's broadcast pipeline, as
// the worker does). With `digests`, both ranks digest every broadcast as wt's host-memory rounds
// do (round_digests.hpp: the root while it sends, rank 1 while the next chunk arrives), and each
// round checks that the two agree. round() returns when both are done.
class RawGloo {
 public:
  RawGloo(std::size_t total, std::size_t tensor_bytes, int64_t buffer, bool digests)
      : digests_(digests) {
    std::size_t used = 0;
    for (std::size_t off = 0; off < total; off += tensor_bytes) {
      used += tensor_bytes;
      if (used > static_cast<std::size_t>(buffer)) {
        chunks_.push_back(used);
        used = 0;
      }
    }
    if (used) chunks_.push_back(used);
    store_ = std::make_unique<wt::plugins::TcpStoreServer>(
        "127.0.0.1", 0, secret_, wt::plugins::TcpStoreServer::Limits::for_world(2));
    const int port = store_->port();
    worker_ = std::thread([this, port] {
      auto g = domain(port, 1);
      const std::size_t most = *std::max_element(chunks_.begin(), chunks_.end());
      std::vector<unsigned char> bufs[2] = {std::vector<unsigned char>(most, 1),
                                            std::vector<unsigned char>(most, 1)};
      for (;;) {
        go_.acquire();
        if (stop_) return;
        {
          wt::plugins::BroadcastPipeline pipeline(*g, 2);
          for (std::size_t c = 0; c < chunks_.size(); ++c) {
            if (c >= 2) pipeline.wait(c % 2);  // the slot's chunk was taken (here: not at all)
            pipeline.submit(c % 2, bufs[c % 2].data(), chunks_[c], {kDLUInt, 8, 1}, "bench");
          }
          pipeline.drain();
        }
        received_ = g->take_digests();
        done_.release();
      }
    });
    root_ = domain(port, 0);
    buf_.assign(*std::max_element(chunks_.begin(), chunks_.end()), 1);
  }
  ~RawGloo() {
    stop_ = true;
    go_.release();
    worker_.join();
  }
  void round() {
    go_.release();
    for (auto n : chunks_) root_->broadcast(buf_.data(), n, {kDLUInt, 8, 1}, 0, "bench");
    done_.acquire();
    const auto sent = root_->take_digests();
    bool same = sent.size() == received_.size();
    for (std::size_t i = 0; same && i < sent.size(); ++i)
      same = sent[i].digest == received_[i].digest;
    if (!same || sent.size() != (digests_ ? chunks_.size() : 0)) {
      fmt::print(stderr, "wt_bench_nccl: the digests of the two ranks disagree\n");
      std::exit(1);
    }
  }

 private:
  // A bare Gloo rank (no wt frame, no challenge), meeting at wt's store.
  class Rank final : public wt::plugins::Communicator {
   public:
    explicit Rank(std::shared_ptr<gloo::rendezvous::Context> c) : context_(std::move(c)) {}
    void broadcast(void* data, std::size_t n, DLDataType, int root, const std::string&) override {
      gloo::BroadcastOptions b(context_);
      b.setOutput<uint8_t>(static_cast<uint8_t*>(data), n);
      b.setRoot(root);
      gloo::broadcast(b);
    }
    void abort() override {}
    bool broken() const override { return false; }

   private:
    std::shared_ptr<gloo::rendezvous::Context> context_;
  };
  std::unique_ptr<wt::plugins::Communicator> domain(int port, int rank) {
    wt::plugins::TcpStoreClient store("127.0.0.1", port,
                                      wt::plugins::SessionKeys::of_secret(secret_, rank),
                                      Clock::now() + std::chrono::seconds(60));
    gloo::transport::tcp::attr attr("127.0.0.1");
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, 2);
    context->setTimeout(std::chrono::seconds(60));
    context->connectFullMesh(store, device);
    auto rank_domain = std::make_unique<Rank>(std::move(context));
    if (!digests_) return rank_domain;
    return std::make_unique<wt::plugins::DigestedDomain>(std::move(rank_domain), rank == 0,
                                                         wt::plugins::digest_seed(secret_.hex()));
  }
  const bool digests_;
  wt::plugins::SessionSecret secret_ = wt::plugins::SessionSecret::mint();
  std::unique_ptr<wt::plugins::TcpStoreServer> store_;
  std::vector<std::size_t> chunks_;
  std::vector<unsigned char> buf_;
  std::unique_ptr<wt::plugins::Communicator> root_;
  std::vector<wt::plugins::BroadcastDigest> received_;  // rank 1's, written before done_
  std::counting_semaphore<> go_{0}, done_{0};
  std::atomic<bool> stop_{false};
  std::thread worker_;
};

template <typename F>
double seconds(F&& f) {
  auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nccl (host, Gloo) throughput next to a raw Gloo broadcast"};
  int mib = 256, rounds = 9, buffer_mib = 64;
  app.add_option("--mib", mib, "model size");
  app.add_option("--rounds", rounds);
  app.add_option("--buffer-mib", buffer_mib, "packed_buffer_size_bytes, in MiB");
  CLI11_PARSE(app, argc, argv);
  const std::size_t total = static_cast<std::size_t>(mib) << 20;
  const int64_t buffer = int64_t{buffer_mib} << 20;
  struct Model {
    const char* name;
    std::size_t count;
  };
  fmt::print("{:<28} {:>14} {:>9} {:>16} {:>9}\n", "model", "packed GB/s", "raw GB/s", "packed/raw",
             "unpacked");
  std::vector<std::string> digest_rows;
  for (Model m : {Model{"4 large tensors", 4}, Model{"2,000 small tensors", 2000}}) {
    const std::size_t tensor = total / m.count / 2 * 2;
    Blocks source(m.count, tensor);
    WtSync packed(source, buffer, true), unpacked(source, buffer, false);
    RawGloo raw(m.count * tensor, tensor, buffer, false);
    RawGloo digested(m.count * tensor, tensor, buffer, true);
    // Warm-up (first touches of every buffer: both halves of each receiver's double buffering),
    // then the four interleaved round by round, so that a noisy moment hits them alike.
    for (int w = 0; w < 2; ++w) {
      packed.round();
      unpacked.round();
      raw.round();
      digested.round();
    }
    std::vector<double> t_packed, t_raw, t_unpacked, t_digested;
    for (int r = 0; r < rounds; ++r) {
      t_packed.push_back(seconds([&] { packed.round(); }));
      t_raw.push_back(seconds([&] { raw.round(); }));
      t_unpacked.push_back(seconds([&] { unpacked.round(); }));
      t_digested.push_back(seconds([&] { digested.round(); }));
    }
    const double bytes = static_cast<double>(source.total());
    const double ours = bytes / median(t_packed) / 1e9, gloo = bytes / median(t_raw) / 1e9;
    const std::string name = fmt::format("{} ({} MiB)", m.name, (m.count * tensor) >> 20);
    fmt::print("{:<28} {:>14.2f} {:>9.2f} {:>16.2f} {:>9.2f}\n", name, ours, gloo, ours / gloo,
               bytes / median(t_unpacked) / 1e9);
    // What hashing alone takes: the digests of one packed round, one per chunk of `buffer` bytes.
    std::vector<double> t_hash;
    volatile unsigned char sink = 0;
    for (int r = 0; r < rounds; ++r)
      t_hash.push_back(seconds([&] {
        for (std::size_t off = 0; off < source.total(); off += static_cast<std::size_t>(buffer)) {
          const std::size_t n = std::min(static_cast<std::size_t>(buffer), source.total() - off);
          sink = sink ^
                 wt::plugins::digest_of(source.data() + off, n, 42, wt::plugins::kDigestThreads)[0];
        }
      }));
    digest_rows.push_back(fmt::format(
        "{:<28} {:>12.1f} {:>9.2f} {:>12.2f} {:>12.1f}", name, median(t_hash) * 1e3 / (bytes / 1e9),
        bytes / median(t_digested) / 1e9, median(t_digested) / median(t_raw),
        100 * (median(t_digested) / median(t_raw) - 1)));
  }
  fmt::print("\n{:<28} {:>12} {:>9} {:>12} {:>12}\n", "round digests (both ends)", "hash ms/GB",
             "GB/s", "time vs raw", "cost %");
  for (const auto& row : digest_rows) fmt::print("{}\n", row);
  return 0;
}
