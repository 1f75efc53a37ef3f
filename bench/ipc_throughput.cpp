// ipc host-memory throughput for a 1 GiB model, next to plain memcpy of the same bytes in the same
// run. A trainer in this process sends to a `wt serve` receiver process over HTTP + POSIX shared
// memory; rounds are timed after warm-up rounds (first touches of fresh memory are slow on some
// VMs, and a trainer syncs thousands of times). Prints GB/s and the ratio to memcpy.
//
//   build/bin/wt_bench_ipc [--gib 1] [--rounds 5] [--tensor-mib 8]
#include <wt/http_client.hpp>
#include <wt/wt.hpp>

#include "subprocess.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

class BlockSource : public wt::WeightSource {
 public:
  BlockSource(std::size_t total, std::size_t tensor_bytes) {
    std::size_t n = total / tensor_bytes;
    for (std::size_t i = 0; i < n; ++i) {
      blocks_.emplace_back(new unsigned char[tensor_bytes]);
      std::memset(blocks_.back().get(), static_cast<int>(i), tensor_bytes);
      shapes_.push_back({static_cast<int64_t>(tensor_bytes / 4)});
      meta_.push_back(
          {fmt::format("model.layers.{}.weight", i), {kDLFloat, 32, 1}, shapes_.back()});
    }
    bytes_ = tensor_bytes;
  }
  const std::vector<wt::ParamMeta>& metadata() override { return meta_; }
  void begin() override { next_ = 0; }
  bool next(wt_tensor& out) override {
    if (next_ >= blocks_.size()) return false;
    out.name = meta_[next_].name.c_str();
    out.tensor = DLTensor{blocks_[next_].get(),  {kDLCPU, 0}, 1, {kDLFloat, 32, 1},
                          shapes_[next_].data(), nullptr,     0};
    ++next_;
    return true;
  }
  void end() override {}
  std::size_t total() const { return blocks_.size() * bytes_; }
  unsigned char* block(std::size_t i) { return blocks_[i].get(); }
  std::size_t count() const { return blocks_.size(); }
  std::size_t block_bytes() const { return bytes_; }

 private:
  std::vector<std::unique_ptr<unsigned char[]>> blocks_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<wt::ParamMeta> meta_;
  std::size_t next_ = 0, bytes_ = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wt ipc throughput benchmark"};
  double gib = 1;
  int rounds = 5, warmup = 2, tensor_mib = 8;
  std::string wt_path;
  app.add_option("--gib", gib, "Model size in GiB")->capture_default_str();
  app.add_option("--rounds", rounds, "Timed rounds")->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed rounds first")->capture_default_str();
  app.add_option("--tensor-mib", tensor_mib, "Size of each tensor")->capture_default_str();
  app.add_option("--wt", wt_path, "Path of the wt program (default: next to this one)");
  CLI11_PARSE(app, argc, argv);
  if (wt_path.empty())
    wt_path = (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "wt").string();

  const auto total = static_cast<std::size_t>(gib * (1ull << 30));
  BlockSource source(total, static_cast<std::size_t>(tensor_mib) << 20);

  // memcpy of the same bytes into warm destinations, measured again before every case so that each
  // ratio compares figures taken under the same conditions.
  std::vector<std::unique_ptr<unsigned char[]>> dst;
  for (std::size_t i = 0; i < source.count(); ++i) {
    dst.emplace_back(new unsigned char[source.block_bytes()]);
    std::memset(dst.back().get(), 0, source.block_bytes());
  }
  auto memcpy_once = [&] {
    auto t0 = Clock::now();
    for (std::size_t i = 0; i < source.count(); ++i)
      std::memcpy(dst[i].get(), source.block(i), source.block_bytes());
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  memcpy_once();  // warm
  fmt::print(
      "model: {} tensors x {} MiB = {:.2f} GiB; memcpy and ipc rounds alternate, figures are "
      "medians\n",
      source.count(), tensor_mib, static_cast<double>(source.total()) / (1ull << 30));

  struct Case {
    const char* name;
    bool packed;
    int64_t buffer;
    int buffers;
  };
  const Case cases[] = {{"ipc unpacked (one segment per tensor)", false, 0, 0},
                        {"ipc packed, 2 x 256 MiB buffers", true, 256 << 20, 2},
                        {"ipc packed, 2 x 64 MiB buffers", true, 64 << 20, 2},
                        {"ipc packed, 4 x 64 MiB buffers", true, 64 << 20, 4},
                        {"ipc packed, 4 x 32 MiB buffers", true, 32 << 20, 4}};
  double best_ratio = 0;
  for (const auto& c : cases) {
    auto [server, url] = wt::cli::start_server(wt_path, {"--backend", "ipc"});
    {
      wt::HttpClient client(url);
      nlohmann::json fields = {{"backend", "ipc"}, {"rank", 0}, {"packed", c.packed}};
      if (c.packed)
        fields.update({{"packed_buffer_size_bytes", c.buffer}, {"packed_num_buffers", c.buffers}});
      auto engine = wt::trainer_init(wt::InitInfo::from_object(fields), client, &source);
      std::vector<double> ipc, mc, ratio;
      for (int r = 0; r < warmup + rounds; ++r) {
        double m = memcpy_once();
        auto t0 = Clock::now();
        engine->send_weights();
        double t = std::chrono::duration<double>(Clock::now() - t0).count();
        if (r < warmup) continue;
        ipc.push_back(t);
        mc.push_back(m);
        ratio.push_back(m / t);
      }
      auto gbs = [&](double sec) { return static_cast<double>(source.total()) / sec / 1e9; };
      best_ratio = std::max(best_ratio, median(ratio));
      fmt::print("{:<40} {:>7.3f} s {:>6.2f} GB/s | memcpy {:>6.2f} GB/s | {:.2f}x memcpy\n",
                 c.name, median(ipc), gbs(median(ipc)), gbs(median(mc)), median(ratio));
      std::fflush(stdout);
    }
    server->kill(SIGTERM);
    server->wait();
  }
  fmt::print("best ipc / memcpy: {:.2f}x (target >= 0.80x)\n", best_ratio);
  return 0;
}
