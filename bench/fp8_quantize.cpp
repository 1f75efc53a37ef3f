// Block FP8 quantization (plugins/common/block_fp8.hpp) on one core: how many GB of BF16 it reads
// per second, against the goal (1 GB/s) and against the fastest thing one core does with the same
// bytes, a plain memcpy of them, measured in the same run. The matrix is a projection's shape
// (7168 x 2048 rows of normal values, 28 MiB) repeated to `--mib`; each figure is the median of
// `--rounds` passes after one warm-up.
//
//   build/bin/wt_bench_fp8 [--mib 256] [--rounds 7]
#include "block_fp8.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
namespace fp8 = wt::plugins::fp8;

template <typename F>
double median_seconds(int rounds, F&& pass) {
  pass();  // warm-up: first touches of the destination
  std::vector<double> s;
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = Clock::now();
    pass();
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("block FP8 quantization throughput, one core");
  int mib = 256, rounds = 7;
  app.add_option("--mib", mib, "BF16 bytes quantized per pass, in MiB")
      ->check(CLI::Range(28, 8192));
  app.add_option("--rounds", rounds, "timed passes")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);

  const int64_t rows = 7168, cols = 2048;
  const int64_t matrices = std::max<int64_t>(1, (int64_t{mib} << 20) / (rows * cols * 2));
  const std::size_t elements = static_cast<std::size_t>(matrices * rows * cols);
  std::vector<uint16_t> src(elements);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (auto& h : src) h = static_cast<uint16_t>(std::bit_cast<uint32_t>(normal(rng)) >> 16);
  std::vector<uint8_t> q(elements);
  std::vector<float> scales(static_cast<std::size_t>(matrices) * 1024);  // 896 blocks each
  std::vector<uint16_t> copy(elements);

  const double quantize_s = median_seconds(rounds, [&] {
    for (int64_t m = 0; m < matrices; ++m) {
      const std::size_t at = static_cast<std::size_t>(m * rows * cols);
      fp8::quantize_bf16({src.data() + at, rows, cols, cols},
                         {q.data() + at, scales.data() + static_cast<std::size_t>(m) * 1024},
                         fp8::ScaleFormat::kFp32, "bench");
    }
  });
  const double memcpy_s =
      median_seconds(rounds, [&] { std::memcpy(copy.data(), src.data(), elements * 2); });
  const double gb = static_cast<double>(elements) * 2 / 1e9;
  const double sent = static_cast<double>(matrices * fp8::bytes_of(rows, cols)) / 1e9;
  fmt::print(
      "block FP8, {} matrices of {} x {} (BF16 {:.3f} GB -> FP8 and scales {:.3f} GB, "
      "{:.3f}x the bytes)\n",
      matrices, rows, cols, gb, sent, sent / gb);
  fmt::print("  quantize (one core)   {:6.2f} GB/s of BF16 read\n", gb / quantize_s);
  fmt::print("  memcpy   (one core)   {:6.2f} GB/s, the same bytes\n", gb / memcpy_s);
  fmt::print(
      "fp8 quantize: {:.2f} GB/s of BF16 per core, {:.2f}x a plain memcpy; goal >= 1 GB/s: "
      "{}\n",
      gb / quantize_s, memcpy_s / quantize_s, gb / quantize_s >= 1.0 ? "met" : "not met");
  return 0;
}
