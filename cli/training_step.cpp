#include "training_step.hpp"

#include <wt/dtype.hpp>

namespace wt::cli {

void perturb(SafetensorsSource& s, double fraction, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  auto rnd = [&x] {
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    return x * 0x2545F4914F6CDD1DULL;
  };
  const auto& meta = s.metadata();
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto bytes = s.bytes(i);
    std::size_t es = element_size(meta[i].dtype);
    std::size_t n = bytes.size() / es;
    if (n == 0) continue;
    auto k = static_cast<std::size_t>(static_cast<double>(n) * fraction + 0.999999);
    for (std::size_t j = 0; j < k && fraction > 0; ++j) {
      std::size_t e = rnd() % n;
      bytes[e * es] ^= static_cast<unsigned char>(1 + rnd() % 255);  // never a no-op
    }
  }
}

std::vector<Delta> deltas_against(SafetensorsSource& checkpoint,
                                  std::vector<std::vector<unsigned char>>& previous) {
  std::vector<Delta> out;
  for (std::size_t i = 0; i < checkpoint.size(); ++i) {
    const auto& meta = checkpoint.metadata()[i];
    auto now = checkpoint.bytes(i);
    std::vector<int64_t> shape = meta.shape;
    const auto ndim = static_cast<int32_t>(shape.size());
    DLTensor before{previous[i].data(), {kDLCPU, 0}, ndim, meta.dtype, shape.data(), nullptr, 0};
    DLTensor after{now.data(), {kDLCPU, 0}, ndim, meta.dtype, shape.data(), nullptr, 0};
    Delta d = make_delta(meta.name, before, after);
    if (d.count > 0) out.push_back(std::move(d));
    previous[i].assign(now.begin(), now.end());
  }
  return out;
}

std::vector<std::vector<unsigned char>> snapshot(SafetensorsSource& s) {
  std::vector<std::vector<unsigned char>> out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto b = s.bytes(i);
    out.emplace_back(b.begin(), b.end());
  }
  return out;
}

}  // namespace wt::cli
