#include <wt/checksum.hpp>

#include <wt/dtype.hpp>
#include <wt/error.hpp>

#include <fmt/format.h>
#include <xxhash.h>

#include <vector>

namespace wt {

std::string checksum_bytes(const void* data, std::size_t n) {
  return fmt::format("{:016x}", static_cast<unsigned long long>(XXH3_64bits(data, n)));
}

std::string checksum_tensor(const DLTensor& t) {
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost)
    throw Error(WT_ERR_UNSUPPORTED, "checksums are computed on host tensors only");
  uint64_t numel = 0;
  if (!checked_numel(t.shape, t.ndim, &numel))
    throw Error(WT_ERR_INVALID_ARGUMENT, "bad tensor shape");
  const std::size_t es = element_size(t.dtype);
  const auto* base = static_cast<const unsigned char*>(t.data) + t.byte_offset;
  bool compact = t.strides == nullptr;
  if (!compact) {
    int64_t expect = 1;
    compact = true;
    for (int32_t d = t.ndim - 1; d >= 0; --d) {
      if (t.shape[d] != 1 && t.strides[d] != expect) compact = false;
      expect *= t.shape[d];
    }
  }
  if (compact) return checksum_bytes(base, numel * es);
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<int64_t> idx(static_cast<std::size_t>(t.ndim), 0);
  for (uint64_t i = 0; i < numel; ++i) {
    int64_t off = 0;
    for (int32_t d = 0; d < t.ndim; ++d) off += idx[d] * t.strides[d];
    XXH3_64bits_update(st, base + off * static_cast<int64_t>(es), es);
    for (int32_t d = t.ndim - 1; d >= 0; --d) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
  auto h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return fmt::format("{:016x}", static_cast<unsigned long long>(h));
}

}  // namespace wt
