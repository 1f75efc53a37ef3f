#include "patch_rules.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/errors.hpp>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

namespace wt::sparse {

using sdk::fail;

namespace {

bool contiguous_1d(const DLTensor& t) {
  return t.ndim == 1 && (t.strides == nullptr || t.shape[0] <= 1 || t.strides[0] == 1);
}

// True when any element is NaN; `bits` 16 (float16 or bfloat16), 32 or 64.
bool has_nan(const unsigned char* p, std::size_t n, DLDataType t) {
  if (t.code == kDLFloat && t.bits == 32) {
    for (std::size_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      if ((v & 0x7f800000u) == 0x7f800000u && (v & 0x007fffffu)) return true;
    }
  } else if (t.code == kDLFloat && t.bits == 64) {
    for (std::size_t i = 0; i < n; ++i) {
      uint64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      if ((v & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (v & 0x000fffffffffffffull))
        return true;
    }
  } else if (t.bits == 16 && (t.code == kDLFloat || t.code == kDLBfloat)) {
    const uint16_t exp = t.code == kDLFloat ? 0x7c00 : 0x7f80;
    const uint16_t man = t.code == kDLFloat ? 0x03ff : 0x007f;
    for (std::size_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      if ((v & exp) == exp && (v & man)) return true;
    }
  }
  return false;
}

}  // namespace

int64_t full_elements(const int64_t* shape, int32_t ndim) {
  int64_t n = 1;
  for (int32_t d = 0; d < ndim; ++d) {
    if (shape[d] <= 0 || shape[d] > INT32_MAX / n) return -1;
    n *= shape[d];
  }
  return n;
}

CheckedRound check_round(std::span<const wt_sparse_patch> patches,
                         void (*read_device)(int, void*, const void*, std::size_t)) {
  CheckedRound round;
  std::vector<unsigned char> indices_copy, values_copy;
  std::vector<int32_t> sorted;
  std::set<std::string> names;
  for (std::size_t k = 0; k < patches.size(); ++k) {
    const wt_sparse_patch& p = patches[k];
    if (p.name == nullptr || *p.name == '\0')
      fail(WT_ERR_INVALID_ARGUMENT, "sparse patch {} has no name", k);
    const std::string name = p.name;
    if (!names.insert(name).second)
      fail(WT_ERR_INVALID_ARGUMENT,
           "sparse patch '{}' appears twice in one round: merge its indices into one patch", name);
    if (p.full_ndim < 0 || (p.full_ndim > 0 && p.full_shape == nullptr))
      fail(WT_ERR_INVALID_ARGUMENT, "Sparse patch requires full_shape: {}", name);
    const int64_t elements = full_elements(p.full_shape, p.full_ndim);
    if (elements < 0)
      fail(WT_ERR_INVALID_ARGUMENT,
           "sparse patch '{}': full_shape needs positive dimensions and at most 2^31 - 1 elements "
           "(int32 indices address them)",
           name);
    const DLTensor& idx = p.indices;
    const DLTensor& val = p.values;
    if (!(idx.dtype.code == kDLInt && idx.dtype.bits == 32 && idx.dtype.lanes == 1))
      fail(WT_ERR_INVALID_ARGUMENT, "Sparse weight updates require int32 indices: {}", name);
    if (idx.ndim != 1 || val.ndim != 1)
      fail(WT_ERR_INVALID_ARGUMENT, "Sparse weight patches must be 1D flattened updates: {}", name);
    if (!contiguous_1d(idx) || !contiguous_1d(val))
      fail(WT_ERR_INVALID_ARGUMENT, "sparse patch '{}': indices and values must be contiguous",
           name);
    if (idx.shape[0] != val.shape[0])
      fail(WT_ERR_INVALID_ARGUMENT, "`indices` and `values` must have matching lengths for {}",
           name);
    if (idx.device.device_type != val.device.device_type ||
        idx.device.device_id != val.device.device_id)
      fail(WT_ERR_INVALID_ARGUMENT,
           "sparse patch '{}': indices and values must be in the same memory", name);
    const bool cuda = idx.device.device_type == kDLCUDA;
    if (!cuda && idx.device.device_type != kDLCPU && idx.device.device_type != kDLCUDAHost)
      fail(WT_ERR_INVALID_ARGUMENT, "sparse patch '{}': memory of device type {} is unsupported",
           name, static_cast<int>(idx.device.device_type));
    const int device = cuda ? idx.device.device_id : -1;
    if (k == 0) round.cuda_device = device;
    if (device != round.cuda_device)
      fail(WT_ERR_INVALID_ARGUMENT,
           "sparse patch '{}' is in other memory than the round's first patch: all patches of a "
           "round must be in host memory, or all on one CUDA device",
           name);
    const auto n = static_cast<std::size_t>(idx.shape[0]);
    const std::size_t value_size = element_size(val.dtype);
    if (n > 0 && (idx.data == nullptr || val.data == nullptr))
      fail(WT_ERR_INVALID_ARGUMENT, "sparse patch '{}' has null data", name);
    const auto* ip = static_cast<const unsigned char*>(idx.data) + idx.byte_offset;
    const auto* vp = static_cast<const unsigned char*>(val.data) + val.byte_offset;
    if (cuda && n > 0) {  // checked in host copies
      indices_copy.resize(4 * n);
      values_copy.resize(value_size * n);
      read_device(device, indices_copy.data(), ip, 4 * n);
      read_device(device, values_copy.data(), vp, value_size * n);
      ip = indices_copy.data();
      vp = values_copy.data();
    }
    // Range and duplicates: one pass when the indices are increasing (as a delta produces them),
    // else over a sorted copy.
    bool increasing = true;
    int32_t previous = -1;
    for (std::size_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, ip + 4 * i, 4);
      if (v < 0 || v >= elements)
        fail(WT_ERR_INVALID_ARGUMENT,
             "sparse patch '{}': index {} (at position {}) is outside [0, {}) of full_shape", name,
             v, i, elements);
      increasing &= v > previous;
      previous = v;
    }
    if (!increasing) {
      sorted.resize(n);
      std::memcpy(sorted.data(), ip, 4 * n);
      std::sort(sorted.begin(), sorted.end());
      if (auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end())
        fail(WT_ERR_INVALID_ARGUMENT, "sparse patch '{}': index {} appears more than once", name,
             *d);
    }
    if (has_nan(vp, n, val.dtype))
      fail(WT_ERR_INVALID_ARGUMENT, "sparse patch '{}': values hold NaN", name);
  }
  return round;
}

}  // namespace wt::sparse
