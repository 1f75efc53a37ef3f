#include "sparse_patches.hpp"

#include <wt/dtype.hpp>
#include <wt/error.hpp>
#include <wt/sdk/patch_scan.hpp>

#include "element_loops.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <string_view>
#include <unordered_map>

namespace wt::detail {
namespace {

bool on_host(const DLTensor& t) {
  return t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost;
}

bool is_1d_compact(const DLTensor& t) {
  return t.ndim == 1 && t.shape != nullptr && t.shape[0] >= 0 &&
         (t.strides == nullptr || t.strides[0] == 1);
}

std::string shown(DLDataType d) {
  auto n = torch_name(d);
  return n == "unknown" ? fmt::format("(code {}, {} bits, {} lanes)", d.code, d.bits, d.lanes)
                        : std::string(n);
}

[[noreturn]] void bad(const wt_sparse_patch& p, const std::string& why) {
  throw Error(WT_ERR_INVALID_ARGUMENT,
              fmt::format("patch for '{}' refused: {}", p.name ? p.name : "", why));
}

}  // namespace

std::vector<int64_t> check_patch_forms(
    std::span<const wt_sparse_patch> patches,
    const std::function<const PatchTarget*(const std::string&)>& target) {
  std::vector<int64_t> limits;
  limits.reserve(patches.size());
  for (const wt_sparse_patch& p : patches) {
    if (p.name == nullptr || *p.name == '\0')
      throw Error(WT_ERR_INVALID_ARGUMENT, "a patch has no parameter name");
    const PatchTarget* t = target(p.name);
    if (t == nullptr)
      throw Error(WT_ERR_NOT_FOUND,
                  fmt::format("patch for '{}' refused: this receiver holds no such parameter "
                              "(patches apply on top of weights it already has)",
                              p.name));
    if (!on_host(p.indices) || !on_host(p.values))
      bad(p, "indices and values must be in host memory here");
    if (!is_1d_compact(p.indices) || p.indices.dtype.code != kDLInt || p.indices.dtype.bits != 32 ||
        p.indices.dtype.lanes != 1)
      bad(p, "indices must be a compact 1-D int32 tensor");
    if (!is_1d_compact(p.values) || p.values.shape[0] != p.indices.shape[0])
      bad(p, fmt::format("values must be a compact 1-D tensor with as many elements as indices "
                         "({})",
                         p.indices.shape[0]));
    if (p.values.dtype.code != t->dtype.code || p.values.dtype.bits != t->dtype.bits ||
        p.values.dtype.lanes != t->dtype.lanes)
      bad(p, fmt::format("values have dtype {} but the parameter is {}", shown(p.values.dtype),
                         shown(t->dtype)));
    if (p.indices.shape[0] > 0 && (p.indices.data == nullptr || p.values.data == nullptr))
      bad(p, "indices or values have no data pointer");
    if (p.full_ndim < 0) bad(p, "full_shape is not given");
    if (p.full_ndim > 0 && p.full_shape == nullptr) bad(p, "full_ndim > 0 but full_shape is NULL");
    const std::span<const int64_t> full(p.full_shape, static_cast<std::size_t>(p.full_ndim));
    if (!std::equal(full.begin(), full.end(), t->shape.begin(), t->shape.end()))
      bad(p, fmt::format("full_shape [{}] differs from the parameter's shape [{}]",
                         fmt::join(full, ", "), fmt::join(t->shape, ", ")));
    int64_t numel = 1;
    for (auto d : t->shape) numel *= d;
    // More indices than elements hold one twice; refused before a copy of them is sized.
    if (p.indices.shape[0] > numel)
      bad(p, fmt::format("{} indices for a parameter of {} elements", p.indices.shape[0], numel));
    limits.push_back(numel);
  }
  return limits;
}

void judge_patch_indices(std::span<const wt_sparse_patch> patches, std::span<const IndexScan> scans,
                         std::span<const int64_t> limits) {
  auto indices_of = [](const wt_sparse_patch& p) {
    return reinterpret_cast<const int32_t*>(static_cast<const unsigned char*>(p.indices.data) +
                                            p.indices.byte_offset);
  };
  // Across the batch, per parameter: its patches, and whether their indices are known to be
  // strictly increasing (one patch whose indices are, as a delta produces them: no sort needed).
  struct Seen {
    std::vector<std::size_t> patches;
    bool increasing = true;
  };
  std::unordered_map<std::string_view, Seen> seen;
  for (std::size_t k = 0; k < patches.size(); ++k) {
    const auto n = static_cast<std::size_t>(patches[k].indices.shape[0]);
    if (scans[k].out_of_range < n)
      bad(patches[k], fmt::format("index {} at position {} is outside [0, {})",
                                  indices_of(patches[k])[scans[k].out_of_range],
                                  scans[k].out_of_range, limits[k]));
    auto [it, first] = seen.try_emplace(patches[k].name);
    it->second.increasing = first && scans[k].increasing;
    it->second.patches.push_back(k);
  }
  // Twice the same index of a parameter, in one patch or in two of the batch, would make the result
  // depend on the order of application.
  for (auto& [name, s] : seen) {
    if (s.increasing) continue;
    std::vector<int32_t> all;
    for (std::size_t k : s.patches) {
      const int32_t* idx = indices_of(patches[k]);
      all.insert(all.end(), idx, idx + patches[k].indices.shape[0]);
    }
    std::sort(all.begin(), all.end());
    if (auto d = std::adjacent_find(all.begin(), all.end()); d != all.end())
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("patch for '{}' refused: index {} appears more than once in this "
                              "batch",
                              name, *d));
  }
}

namespace {

// Scattered writes wait on memory: the lines a few elements ahead are asked for early. The element
// size is a constant here, so each write is one move rather than a call to memcpy.
template <std::size_t kSize>
void scatter(const int32_t* idx, const unsigned char* val, int64_t n, unsigned char* dst) {
  constexpr int64_t kAhead = 16;
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n)
      __builtin_prefetch(dst + static_cast<std::size_t>(idx[i + kAhead]) * kSize, 1);
    std::memcpy(dst + static_cast<std::size_t>(idx[i]) * kSize,
                val + static_cast<std::size_t>(i) * kSize, kSize);
  }
}

}  // namespace

void apply_patch(const wt_sparse_patch& p, unsigned char* dst) {
  const std::size_t es = element_size(p.values.dtype);
  const auto* idx = reinterpret_cast<const int32_t*>(static_cast<const char*>(p.indices.data) +
                                                     p.indices.byte_offset);
  const auto* val = static_cast<const unsigned char*>(p.values.data) + p.values.byte_offset;
  const int64_t n = p.indices.shape[0];
  const bool fixed =
      with_fixed_size(es, [&]<std::size_t kSize>() { scatter<kSize>(idx, val, n, dst); });
  if (!fixed)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(dst + static_cast<std::size_t>(idx[i]) * es,
                  val + static_cast<std::size_t>(i) * es, es);
}

}  // namespace wt::detail
