#include "device_copy.hpp"

#include <wt/error.hpp>

#include <fmt/format.h>

#ifdef WT_CLI_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace wt::cli {

DLDevice parse_device(const std::string& text) {
  if (text == "cpu") return {kDLCPU, 0};
  if (text.rfind("cuda:", 0) == 0) {
    try {
      std::size_t used = 0;
      int id = std::stoi(text.substr(5), &used);
      if (used == text.size() - 5 && id >= 0) return {kDLCUDA, id};
    } catch (...) {
    }
  }
  throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("device '{}' must be 'cpu' or 'cuda:N'", text));
}

void copy_device_to_host(void* dst, const DLTensor& src, std::size_t n) {
#ifdef WT_CLI_WITH_CUDA
  // On the tensor's own device (a loader pool thread starts on device 0), restored afterwards.
  int previous = 0;
  cudaError_t e = cudaGetDevice(&previous);
  if (e == cudaSuccess && previous != src.device.device_id) e = cudaSetDevice(src.device.device_id);
  if (e == cudaSuccess)
    e = cudaMemcpy(dst, static_cast<const char*>(src.data) + src.byte_offset, n,
                   cudaMemcpyDeviceToHost);
  if (previous != src.device.device_id) cudaSetDevice(previous);
  if (e != cudaSuccess)
    throw Error(WT_ERR_DEVICE, fmt::format("copying {} bytes from cuda:{} to host failed: {}", n,
                                           src.device.device_id, cudaGetErrorString(e)));
#else
  (void)dst, (void)src, (void)n;
  throw Error(WT_ERR_UNSUPPORTED, "this wt was built without the CUDA toolkit");
#endif
}

}  // namespace wt::cli
