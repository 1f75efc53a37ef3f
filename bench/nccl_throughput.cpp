// nccl host-memory throughput (Gloo), packed, next to a raw Gloo broadcast of the same bytes in the
// same chunks between the same two ranks, in one run. The trainer and a reference receiver run in
// this process (two threads, two Gloo ranks over loopback TCP), for two models: a few large
// tensors, and 2,000 small ones. Rounds are timed after a warm-up round. Prints GB/s, the ratio
// of packed to raw, and unpacked GB/s (one broadcast per tensor, into the receiver's memory).
//
//   build/bin/wt_bench_nccl [--mib 256] [--rounds 3] [--buffer-mib 64]
#include "broadcast_group.hpp"
#include "support/free_port.hpp"

#include <wt/receiver.hpp>
#include <wt/wt.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
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

 private:
  std::vector<unsigned char> data_;
  std::size_t bytes_;
  std::vector<int64_t> shape_;
  std::vector<wt::ParamMeta> meta_;
  std::size_t next_ = 0;
};

double wt_sync(Blocks& source, int rounds, int64_t buffer, bool packed) {
  wt::Receiver::Options ro;
  ro.backend = "nccl";
  wt::Receiver receiver(ro);
  wt::InProcessClient client(receiver);
  auto info = wt::InitInfo::from_object({{"backend", "nccl"},
                                         {"master_address", "127.0.0.1"},
                                         {"master_port", free_port()},
                                         {"world_size", 2},
                                         {"rank", 0},
                                         {"packed", packed},
                                         {"packed_buffer_size_bytes", buffer}});
  auto engine = wt::trainer_init(info, client, &source);
  engine->send_weights();  // warm-up: first touches of the receiver's memory
  auto t0 = Clock::now();
  for (int r = 0; r < rounds; ++r) engine->send_weights();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(source.total()) * rounds / s / 1e9;
}

// The same bytes, in vLLM's packed chunks, with nothing but Gloo broadcasts.
double raw_gloo(std::size_t total, std::size_t tensor_bytes, int rounds, int64_t buffer) {
  std::vector<std::size_t> chunks;
  std::size_t used = 0;
  for (std::size_t off = 0; off < total; off += tensor_bytes) {
    used += tensor_bytes;
    if (used > static_cast<std::size_t>(buffer)) {
      chunks.push_back(used);
      used = 0;
    }
  }
  if (used) chunks.push_back(used);
  const int port = free_port();
  double gbps = 0;
  auto rank = [&](int r) {
    wt::plugins::BroadcastGroup::Options o;
    o.master_address = "127.0.0.1";
    o.master_port = port;
    o.rank = r;
    o.world_size = 2;
    wt::plugins::BroadcastGroup g(o);
    std::vector<unsigned char> buf(*std::max_element(chunks.begin(), chunks.end()), 1);
    auto round = [&] {
      for (auto n : chunks) g.broadcast(buf.data(), n, 0, "bench");
    };
    round();
    auto t0 = Clock::now();
    for (int i = 0; i < rounds; ++i) round();
    if (r == 0)
      gbps = static_cast<double>(total) * rounds /
             std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
  };
  std::thread worker(rank, 1);
  rank(0);
  worker.join();
  return gbps;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nccl (host, Gloo) throughput next to a raw Gloo broadcast"};
  int mib = 256, rounds = 3, buffer_mib = 64;
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
  for (Model m : {Model{"4 large tensors", 4}, Model{"2,000 small tensors", 2000}}) {
    const std::size_t tensor = total / m.count / 2 * 2;
    Blocks source(m.count, tensor);
    double ours = wt_sync(source, rounds, buffer, true);
    double raw = raw_gloo(m.count * tensor, tensor, rounds, buffer);
    double unpacked = wt_sync(source, rounds, buffer, false);
    fmt::print("{:<28} {:>14.2f} {:>9.2f} {:>16.2f} {:>9.2f}\n",
               fmt::format("{} ({} MiB)", m.name, (m.count * tensor) >> 20), ours, raw, ours / raw,
               unpacked);
  }
  return 0;
}
