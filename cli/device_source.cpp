#include "device_source.hpp"

#include <wt/dtype.hpp>
#include <wt/error.hpp>

#ifdef WT_CLI_WITH_CUDA
#include <wt/sdk/cuda_driver.hpp>
#endif

#include <fmt/format.h>

#include <vector>

namespace wt::cli {

#ifdef WT_CLI_WITH_CUDA

namespace {

namespace drv = sdk::cuda;

class DeviceSource final : public WeightSource {
 public:
  DeviceSource(WeightSource& host, int device) : host_(host), device_(device) {
    drv::DeviceGuard g(device_);  // the driver and the device, now
  }
  ~DeviceSource() override {
    try {
      drv::DeviceGuard g(device_);
      for (CUdeviceptr p : memory_) drv::driver().MemFree(p);
    } catch (...) {
    }
  }
  const std::vector<ParamMeta>& metadata() override { return host_.metadata(); }
  void begin() override {
    host_.begin();
    index_ = 0;
  }
  bool next(wt_tensor& out) override {
    if (!host_.next(out)) return false;
    uint64_t n = 0;
    if (!checked_nbytes(out.tensor.shape, out.tensor.ndim, out.tensor.dtype, &n))
      throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("tensor '{}': a bad shape", out.name));
    drv::DeviceGuard g(device_);
    if (index_ == memory_.size()) {
      CUdeviceptr p = 0;
      drv::check(drv::driver().MemAlloc(&p, n == 0 ? 1 : n), "cuMemAlloc");
      memory_.push_back(p);
      sizes_.push_back(n);
    }
    if (sizes_[index_] != n)
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("tensor '{}' changed size between rounds", out.name));
    const auto* src = static_cast<const unsigned char*>(out.tensor.data) + out.tensor.byte_offset;
    drv::check(
        drv::driver().MemcpyAsync(memory_[index_], reinterpret_cast<CUdeviceptr>(src), n, nullptr),
        "cuMemcpyAsync of a checkpoint tensor to the device");
    drv::check(drv::driver().CtxSynchronize(), "cuCtxSynchronize");

    out.tensor.data = reinterpret_cast<void*>(memory_[index_]);
    out.tensor.byte_offset = 0;
    out.tensor.device = {kDLCUDA, device_};
    ++index_;
    return true;
  }
  void end() override { host_.end(); }

 private:
  WeightSource& host_;
  int device_;
  std::size_t index_ = 0;
  std::vector<CUdeviceptr> memory_;
  std::vector<uint64_t> sizes_;
};

}  // namespace

std::unique_ptr<WeightSource> make_device_source(WeightSource& host, int device) {
  return std::make_unique<DeviceSource>(host, device);
}

#else

std::unique_ptr<WeightSource> make_device_source(WeightSource&, int) {
  throw Error(WT_ERR_UNSUPPORTED, "this wt was built without the CUDA toolkit: no CUDA trainer");
}

#endif

}  // namespace wt::cli
