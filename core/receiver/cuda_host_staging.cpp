#include <wt/services/cuda_host_staging.hpp>

#include <wt/error.hpp>

#ifdef WT_RECEIVER_WITH_CUDA
#include <wt/sdk/cuda_driver.hpp>
#endif

#include <fmt/format.h>

namespace wt {

#ifdef WT_RECEIVER_WITH_CUDA

namespace {

namespace drv = sdk::cuda;

class CudaHostStaging final : public Receiver::DeviceStaging {
 public:
  explicit CudaHostStaging(int device) : device_(device), stream_(device) {}

  void* allocate_host(std::size_t n) override {
    drv::DeviceGuard g(device_);
    void* p = nullptr;
    // Portable: pinned for every context, so any device's copy may land there.
    drv::check(drv::driver().MemHostAlloc(&p, n, CU_MEMHOSTALLOC_PORTABLE),
               "cuMemHostAlloc of pinned memory for received weights");
    return p;
  }

  void free_host(void* p) noexcept override {
    try {
      drv::DeviceGuard g(device_);
      drv::driver().MemFreeHost(p);
    } catch (...) {  // the driver is gone: so is the memory
    }
  }

  void copy_to_host(void* dst, const DLTensor& src, std::size_t n) override {
    if (src.device.device_type != kDLCUDA || src.device.device_id != device_)
      throw Error(
          WT_ERR_INVALID_ARGUMENT,
          fmt::format("a tensor on device type {} id {} reached a receiver on cuda:{}",
                      static_cast<int>(src.device.device_type), src.device.device_id, device_));
    drv::DeviceGuard g(device_);
    drv::check(drv::driver().MemcpyAsync(reinterpret_cast<CUdeviceptr>(dst),
                                         reinterpret_cast<CUdeviceptr>(src.data) + src.byte_offset,
                                         n, stream_.get()),
               "cuMemcpyAsync of a received tensor to host");
  }

  void* stream() const override { return stream_.get(); }

  void synchronize() override { stream_.synchronize(); }

 private:
  int device_;
  drv::OwnStream stream_;
};

}  // namespace

std::shared_ptr<Receiver::DeviceStaging> make_cuda_host_staging(int device) {
  return std::make_shared<CudaHostStaging>(device);
}

#else

std::shared_ptr<Receiver::DeviceStaging> make_cuda_host_staging(int) {
  throw Error(WT_ERR_UNSUPPORTED, "this wt was built without the CUDA toolkit: no CUDA receiver");
}

#endif

}  // namespace wt
