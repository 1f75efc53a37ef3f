#include <wt/services/sparse_patches.hpp>

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

namespace wt::patching {
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

std::vector<PatchForm> check_patch_forms(
    std::span<const wt_sparse_patch> patches,
    const std::function<const PatchTarget*(const std::string&)>& target) {
  std::vector<PatchForm> forms;
  forms.reserve(patches.size());
  std::unordered_map<std::string_view, int64_t> indices_of;  // per parameter, across the batch
  for (const wt_sparse_patch& p : patches) {
    if (p.name == nullptr || *p.name == '\0')
      throw Error(WT_ERR_INVALID_ARGUMENT, "a patch has no parameter name");
    PatchForm& f = forms.emplace_back();
    f.name = p.name;
    const PatchTarget* t = target(f.name);
    if (t == nullptr)
      throw Error(WT_ERR_NOT_FOUND,
                  fmt::format("patch for '{}' refused: this receiver holds no such parameter "
                              "(patches apply on top of weights it already has)",
                              f.name));
    const DLTensor indices = p.indices, values = p.values;
    if (!on_host(indices) || !on_host(values))
      bad(p, "indices and values must be in host memory here");
    if (!is_1d_compact(indices) || indices.dtype.code != kDLInt || indices.dtype.bits != 32 ||
        indices.dtype.lanes != 1)
      bad(p, "indices must be a compact 1-D int32 tensor");
    f.count = indices.shape[0];
    if (!is_1d_compact(values) || values.shape[0] != f.count)
      bad(p, fmt::format("values must be a compact 1-D tensor with as many elements as indices "
                         "({})",
                         f.count));
    if (values.dtype.code != t->dtype.code || values.dtype.bits != t->dtype.bits ||
        values.dtype.lanes != t->dtype.lanes)
      bad(p, fmt::format("values have dtype {} but the parameter is {}", shown(values.dtype),
                         shown(t->dtype)));
    f.dtype = values.dtype;
    f.element_size = element_size(f.dtype);
    if (f.element_size == 0)
      bad(p, fmt::format("its dtype {} has no whole-byte elements to patch", shown(f.dtype)));
    if (f.count > 0 && (indices.data == nullptr || values.data == nullptr))
      bad(p, "indices or values have no data pointer");
    if (f.count > 0) {
      f.indices = static_cast<const unsigned char*>(indices.data) + indices.byte_offset;
      f.values = static_cast<const unsigned char*>(values.data) + values.byte_offset;
    }
    if (p.full_ndim < 0) bad(p, "full_shape is not given");
    if (p.full_ndim > 0 && p.full_shape == nullptr) bad(p, "full_ndim > 0 but full_shape is NULL");
    const std::span<const int64_t> full(p.full_shape, static_cast<std::size_t>(p.full_ndim));
    if (!std::equal(full.begin(), full.end(), t->shape.begin(), t->shape.end()))
      bad(p, fmt::format("full_shape [{}] differs from the parameter's shape [{}]",
                         fmt::join(full, ", "), fmt::join(t->shape, ", ")));
    // The receiver's own tensor: its byte count fit 64 bits when it was stored, so its element
    // count does too.
    f.limit = 1;
    for (auto d : t->shape) f.limit *= d;
    // More indices for a parameter than it has elements (or than int32 can address) hold one
    // twice: refused before anything is sized by the count.
    int64_t& sum = indices_of[f.name];
    const int64_t most = std::min<int64_t>(f.limit, INT32_MAX);
    if (f.count > most - sum)
      bad(p, fmt::format("{} indices for a parameter of {} elements{}", sum + f.count, f.limit,
                         sum > 0 ? " (across the batch)" : ""));
    sum += f.count;
  }
  return forms;
}

void judge_patch_indices(std::span<const PatchForm> forms, std::span<const int32_t* const> indices,
                         std::span<const IndexScan> scans) {
  auto refuse = [](const std::string& name, const std::string& why) {
    throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("patch for '{}' refused: {}", name, why));
  };
  // Across the batch, per parameter: its patches, and whether their indices are known to be
  // strictly increasing (one patch whose indices are, as a delta produces them: no sort needed).
  struct Seen {
    std::vector<std::size_t> patches;
    bool increasing = true;
  };
  std::unordered_map<std::string_view, Seen> seen;
  for (std::size_t k = 0; k < forms.size(); ++k) {
    const auto n = static_cast<std::size_t>(forms[k].count);
    if (scans[k].out_of_range < n)
      refuse(forms[k].name,
             fmt::format("index {} at position {} is outside [0, {})",
                         indices[k][scans[k].out_of_range], scans[k].out_of_range, forms[k].limit));
    auto [it, first] = seen.try_emplace(forms[k].name);
    it->second.increasing = first && scans[k].increasing;
    it->second.patches.push_back(k);
  }
  // Twice the same index of a parameter, in one patch or in two of the batch, would make the result
  // depend on the order of application.
  for (auto& [name, s] : seen) {
    if (s.increasing) continue;
    std::vector<int32_t> all;
    for (std::size_t k : s.patches) all.insert(all.end(), indices[k], indices[k] + forms[k].count);
    std::sort(all.begin(), all.end());
    if (auto d = std::adjacent_find(all.begin(), all.end()); d != all.end())
      refuse(std::string(name), fmt::format("index {} appears more than once in this batch", *d));
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

void apply_patch(const int32_t* indices, const unsigned char* values, int64_t count,
                 std::size_t element_size, unsigned char* dst) {
  const bool fixed = detail::with_fixed_size(
      element_size, [&]<std::size_t kSize>() { scatter<kSize>(indices, values, count, dst); });
  if (!fixed)
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(dst + static_cast<std::size_t>(indices[i]) * element_size,
                  values + static_cast<std::size_t>(i) * element_size, element_size);
}

}  // namespace wt::patching
