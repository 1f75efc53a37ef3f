#include "device_bytes.hpp"

#include <wt/sdk/errors.hpp>

#ifdef WT_PLUGIN_WITH_CUDA
#include <wt/sdk/cuda_driver.hpp>
#endif

#include <utility>

namespace wt::plugins {

#ifdef WT_PLUGIN_WITH_CUDA

namespace drv = sdk::cuda;

DeviceBytes::DeviceBytes(int device, std::size_t size) : size_(size), device_(device) {
  drv::DeviceGuard g(device);
  CUdeviceptr p = 0;
  drv::check(drv::driver().MemAlloc(&p, size == 0 ? 1 : size), "cuMemAlloc");
  ptr_ = reinterpret_cast<void*>(p);
}

DeviceBytes::~DeviceBytes() {
  if (ptr_ == nullptr) return;
  try {
    drv::DeviceGuard g(device_);
    drv::driver().MemFree(reinterpret_cast<CUdeviceptr>(ptr_));
  } catch (...) {  // the device is gone, and its memory with it
  }
}

void copy_async(int device, void* dst, const void* src, std::size_t n, void* stream) {
  drv::DeviceGuard g(device);
  drv::check(drv::driver().MemcpyAsync(reinterpret_cast<CUdeviceptr>(dst),
                                       reinterpret_cast<CUdeviceptr>(src), n,
                                       static_cast<CUstream>(stream)),
             "cuMemcpyAsync");
}

void wait_stream(int device, void* stream) {
  drv::DeviceGuard g(device);
  if (stream != nullptr)
    drv::check(drv::driver().StreamSynchronize(static_cast<CUstream>(stream)),
               "cuStreamSynchronize");
  else
    drv::check(drv::driver().CtxSynchronize(), "cuCtxSynchronize");
}

#else

namespace {
[[noreturn]] void unsupported() {
  sdk::fail(WT_ERR_UNSUPPORTED, "this plugin was built without the CUDA toolkit: no CUDA memory");
}
}  // namespace

DeviceBytes::DeviceBytes(int, std::size_t) {
  unsupported();
}
DeviceBytes::~DeviceBytes() = default;
void copy_async(int, void*, const void*, std::size_t, void*) {
  unsupported();
}
void wait_stream(int, void*) {
  unsupported();
}

#endif

void DeviceBytes::swap(DeviceBytes& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(size_, o.size_);
  std::swap(device_, o.device_);
}

}  // namespace wt::plugins
