#include <wt/checksum.hpp>

#include <wt/dtype.hpp>
#include <wt/error.hpp>
#include <wt/sdk/tensor_layout.hpp>

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
  uint64_t nbytes = 0;
  if (!checked_nbytes(t.shape, t.ndim, t.dtype, &nbytes))
    throw Error(WT_ERR_INVALID_ARGUMENT, "bad tensor shape (negative, or too many bytes)");
  if (is_compact(t))
    return checksum_bytes(static_cast<const unsigned char*>(t.data) + t.byte_offset, nbytes);
  std::vector<unsigned char> contiguous(nbytes);
  copy_to_contiguous(contiguous.data(), t, nbytes);
  return checksum_bytes(contiguous.data(), nbytes);
}

}  // namespace wt
