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
  cudaError_t e = cudaMemcpy(dst, static_cast<const char*>(src.data) + src.byte_offset, n,
                             cudaMemcpyDeviceToHost);
  if (e != cudaSuccess)
    throw Error(WT_ERR_DEVICE,
                fmt::format("cudaMemcpy device to host failed: {}", cudaGetErrorString(e)));
#else
  (void)dst, (void)src, (void)n;
  throw Error(WT_ERR_UNSUPPORTED, "this wt was built without the CUDA toolkit");
#endif
}

}  // namespace wt::cli
