// The CUDA driver API, reached at run time: `dlopen("libcuda.so.1")`, then every entry point
// through `cuGetProcAddress` at one fixed driver API version. Code built on this needs no CUDA
// runtime library and links no libcuda, so it
//   - loads on a machine without an NVIDIA driver and says why CUDA is unavailable when used;
//   - runs with any driver that serves driver API 12.0 (r525 or newer), whatever toolkit built it:
//     a build with toolkit 13.0 still runs on a cluster's r535 driver, which a statically linked
//     13.0 runtime refuses (cudaErrorInsufficientDriver).
// It needs the toolkit's headers (cuda.h, cudaTypedefs.h) at build time only. docs/cuda.md.
//
// Errors are wt::sdk::Error: WT_ERR_UNSUPPORTED where CUDA cannot be used here at all (no
// driver, a driver too old, no device), WT_ERR_DEVICE for a failed call.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/sdk/errors.hpp>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>

namespace wt::sdk::cuda {

// Every entry point is requested at this driver API version (CUDA 12.0: r525 drivers or newer),
// so its ABI is the one of the PFN_..._vNNNN typedef named below, not the newest header's.
inline constexpr int kDriverApiVersion = 12000;

struct Driver {
  int version = 0;  // cuDriverGetVersion: 12020 for a CUDA 12.2 (r535) driver
  PFN_cuGetProcAddress_v11030 GetProcAddress = nullptr;
  PFN_cuGetErrorString_v6000 GetErrorString = nullptr;
  PFN_cuGetErrorName_v6000 GetErrorName = nullptr;
  PFN_cuDeviceGetCount_v2000 DeviceGetCount = nullptr;
  PFN_cuDeviceGet_v2000 DeviceGet = nullptr;
  PFN_cuDeviceGetUuid_v11040 DeviceGetUuid = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 DevicePrimaryCtxRetain = nullptr;
  PFN_cuCtxGetCurrent_v4000 CtxGetCurrent = nullptr;
  PFN_cuCtxSetCurrent_v4000 CtxSetCurrent = nullptr;
  PFN_cuCtxSynchronize_v2000 CtxSynchronize = nullptr;
  PFN_cuPointerGetAttribute_v4000 PointerGetAttribute = nullptr;
  PFN_cuMemGetAddressRange_v3020 MemGetAddressRange = nullptr;
  PFN_cuMemAlloc_v3020 MemAlloc = nullptr;
  PFN_cuMemFree_v3020 MemFree = nullptr;
  PFN_cuMemHostAlloc_v2020 MemHostAlloc = nullptr;
  PFN_cuMemFreeHost_v2000 MemFreeHost = nullptr;
  PFN_cuMemcpyAsync_v4000 MemcpyAsync = nullptr;
  PFN_cuStreamCreate_v2000 StreamCreate = nullptr;
  PFN_cuStreamDestroy_v4000 StreamDestroy = nullptr;
  PFN_cuStreamSynchronize_v2000 StreamSynchronize = nullptr;
  PFN_cuIpcGetMemHandle_v4010 IpcGetMemHandle = nullptr;
  PFN_cuIpcOpenMemHandle_v11000 IpcOpenMemHandle = nullptr;
  PFN_cuIpcCloseMemHandle_v4010 IpcCloseMemHandle = nullptr;

  // Any other entry point, at kDriverApiVersion; nullptr when this driver lacks it. `Fn` must be
  // the PFN typedef of the version that was current in CUDA 12.0.
  template <typename Fn>
  Fn entry(const char* name) const {
    void* fn = nullptr;
    if (GetProcAddress(name, &fn, kDriverApiVersion, CU_GET_PROC_ADDRESS_DEFAULT) != CUDA_SUCCESS)
      return nullptr;
    return reinterpret_cast<Fn>(fn);
  }
};

namespace detail {

struct Loaded {
  std::unique_ptr<Driver> driver;
  wt_status code = WT_ERR_UNSUPPORTED;
  std::string why;  // when driver is null
};

inline std::string error_text(const Driver& d, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.GetErrorName == nullptr || d.GetErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
  if (d.GetErrorString == nullptr || d.GetErrorString(r, &text) != CUDA_SUCCESS) text = nullptr;
  return fmt::format("{} ({})", text ? text : "unknown error", name ? name : std::to_string(r));
}

inline Loaded load() {
  Loaded out;
  // Never closed: the driver stays for the life of the process (unloading it is not supported).
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    out.why = fmt::format("no NVIDIA driver here: libcuda.so.1 could not be loaded ({})",
                          e ? e : "not found");
    return out;
  }
  auto d = std::make_unique<Driver>();
  d->GetProcAddress = reinterpret_cast<PFN_cuGetProcAddress_v11030>(dlsym(lib, "cuGetProcAddress"));
  if (d->GetProcAddress == nullptr) {
    out.why =
        "the NVIDIA driver is too old: its libcuda.so.1 has no cuGetProcAddress; wt needs a driver "
        "that serves CUDA 12.0 or newer (r525+)";
    return out;
  }
  auto get = [&](const char* name, auto& slot) {
    slot = d->entry<std::remove_reference_t<decltype(slot)>>(name);
    return slot != nullptr;
  };
  get("cuGetErrorString", d->GetErrorString);
  get("cuGetErrorName", d->GetErrorName);
  PFN_cuDriverGetVersion_v2020 get_version = nullptr;
  PFN_cuInit_v2000 init = nullptr;
  if (!get("cuDriverGetVersion", get_version) || get_version(&d->version) != CUDA_SUCCESS) {
    out.why = "the NVIDIA driver does not report its version (cuDriverGetVersion)";
    return out;
  }
  if (d->version < kDriverApiVersion) {
    out.why = fmt::format(
        "the NVIDIA driver serves CUDA {}.{}; wt needs a driver that serves CUDA {}.{} or newer "
        "(r525+)",
        d->version / 1000, d->version % 1000 / 10, kDriverApiVersion / 1000,
        kDriverApiVersion % 1000 / 10);
    return out;
  }
  if (!get("cuInit", init)) {
    out.why = "the NVIDIA driver has no cuInit";
    return out;
  }
  if (CUresult r = init(0); r != CUDA_SUCCESS) {
    out.why = r == CUDA_ERROR_NO_DEVICE
                  ? "no CUDA device: the NVIDIA driver found none (cuInit: CUDA_ERROR_NO_DEVICE)"
                  : "the NVIDIA driver failed to initialise: cuInit: " + error_text(*d, r);
    return out;
  }
  const std::pair<const char*, bool> entries[] = {
      {"cuDeviceGetCount", get("cuDeviceGetCount", d->DeviceGetCount)},
      {"cuDeviceGet", get("cuDeviceGet", d->DeviceGet)},
      {"cuDeviceGetUuid", get("cuDeviceGetUuid", d->DeviceGetUuid)},
      {"cuDevicePrimaryCtxRetain", get("cuDevicePrimaryCtxRetain", d->DevicePrimaryCtxRetain)},
      {"cuCtxGetCurrent", get("cuCtxGetCurrent", d->CtxGetCurrent)},
      {"cuCtxSetCurrent", get("cuCtxSetCurrent", d->CtxSetCurrent)},
      {"cuCtxSynchronize", get("cuCtxSynchronize", d->CtxSynchronize)},
      {"cuPointerGetAttribute", get("cuPointerGetAttribute", d->PointerGetAttribute)},
      {"cuMemGetAddressRange", get("cuMemGetAddressRange", d->MemGetAddressRange)},
      {"cuMemAlloc", get("cuMemAlloc", d->MemAlloc)},
      {"cuMemFree", get("cuMemFree", d->MemFree)},
      {"cuMemHostAlloc", get("cuMemHostAlloc", d->MemHostAlloc)},
      {"cuMemFreeHost", get("cuMemFreeHost", d->MemFreeHost)},
      {"cuMemcpyAsync", get("cuMemcpyAsync", d->MemcpyAsync)},
      {"cuStreamCreate", get("cuStreamCreate", d->StreamCreate)},
      {"cuStreamDestroy", get("cuStreamDestroy", d->StreamDestroy)},
      {"cuStreamSynchronize", get("cuStreamSynchronize", d->StreamSynchronize)},
      {"cuIpcGetMemHandle", get("cuIpcGetMemHandle", d->IpcGetMemHandle)},
      {"cuIpcOpenMemHandle", get("cuIpcOpenMemHandle", d->IpcOpenMemHandle)},
      {"cuIpcCloseMemHandle", get("cuIpcCloseMemHandle", d->IpcCloseMemHandle)},
  };
  for (const auto& [name, found] : entries)
    if (!found) {
      out.why = fmt::format("the NVIDIA driver (CUDA {}.{}) does not provide {}", d->version / 1000,
                            d->version % 1000 / 10, name);
      return out;
    }
  out.driver = std::move(d);
  return out;
}

inline const Loaded& loaded() {
  static const Loaded l = load();  // once per process (per module), thread-safe
  return l;
}

}  // namespace detail

// The driver, loaded and initialised on first use; throws WT_ERR_UNSUPPORTED saying why not.
inline const Driver& driver() {
  const auto& l = detail::loaded();
  if (!l.driver) throw Error(l.code, l.why);
  return *l.driver;
}

// Turns a failed call into an Error naming it. Errors that mean "no usable CUDA here" are
// WT_ERR_UNSUPPORTED; everything else, cudaErrorNotSupported's driver twin included, is a device
// error.
inline void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const bool unusable = r == CUDA_ERROR_NO_DEVICE || r == CUDA_ERROR_NOT_INITIALIZED ||
                        r == CUDA_ERROR_STUB_LIBRARY || r == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH ||
                        r == CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE;
  throw Error(unusable ? WT_ERR_UNSUPPORTED : WT_ERR_DEVICE,
              fmt::format("{} failed: {}", what, detail::error_text(driver(), r)));
}

inline int device_count() {
  int n = 0;
  check(driver().DeviceGetCount(&n), "cuDeviceGetCount");
  return n;
}

// The primary context of `device` (the one the CUDA runtime, and so PyTorch, uses), retained once
// per process and never released.
inline CUcontext primary_context(int device) {
  static std::mutex mu;
  static std::array<CUcontext, 64> contexts{};
  const int n = device_count();
  if (device < 0 || device >= n)
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("cuda:{}: this machine has {} CUDA device(s)", device, n));
  if (static_cast<std::size_t>(device) >= contexts.size())
    throw Error(WT_ERR_UNSUPPORTED,
                fmt::format("cuda:{}: wt handles up to {} devices", device, contexts.size()));
  std::lock_guard<std::mutex> l(mu);
  if (contexts[device] == nullptr) {
    CUdevice dev = 0;
    check(driver().DeviceGet(&dev, device), "cuDeviceGet");
    check(driver().DevicePrimaryCtxRetain(&contexts[device], dev), "cuDevicePrimaryCtxRetain");
  }
  return contexts[device];
}

// Makes `device`'s primary context current on the calling thread for its scope, then restores
// whatever the caller had (none included): a trainer thread keeps its device, and no stray context
// appears on GPU 0. Every CUDA call of wt runs under one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    const Driver& d = driver();
    CUcontext want = primary_context(device);
    check(d.CtxGetCurrent(&previous_), "cuCtxGetCurrent");
    if (previous_ != want) {
      check(d.CtxSetCurrent(want), "cuCtxSetCurrent");
      switched_ = true;
    }
  }
  ~DeviceGuard() {
    if (switched_) driver().CtxSetCurrent(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

// A stream of wt's own on `device`: non-blocking (not ordered with the legacy default stream),
// synchronised and destroyed with the object.
class OwnStream {
 public:
  explicit OwnStream(int device) : device_(device) {
    DeviceGuard g(device);
    check(driver().StreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  }
  ~OwnStream() {
    try {
      DeviceGuard g(device_);
      driver().StreamSynchronize(stream_);
      driver().StreamDestroy(stream_);
    } catch (...) {  // the device is gone, and its streams with it
    }
  }
  OwnStream(const OwnStream&) = delete;
  OwnStream& operator=(const OwnStream&) = delete;
  CUstream get() const { return stream_; }
  int device() const { return device_; }
  void synchronize() const {
    DeviceGuard g(device_);
    check(driver().StreamSynchronize(stream_), "cuStreamSynchronize");
  }

 private:
  int device_;
  CUstream stream_ = nullptr;
};

}  // namespace wt::sdk::cuda
