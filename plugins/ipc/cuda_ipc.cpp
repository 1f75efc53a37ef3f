#include "cuda_ipc.hpp"

#include "ipc_wire.hpp"

#include <wt/sdk/errors.hpp>

#ifdef WT_PLUGIN_WITH_CUDA
#include <wt/sdk/cuda_driver.hpp>
#endif

#include <cstring>

namespace wt::ipc::cuda {

using sdk::fail;

#ifdef WT_PLUGIN_WITH_CUDA

// Every call goes to the driver API through sdk/cuda_driver.hpp: no CUDA runtime is linked, so the
// plugin loads without a driver and runs on any driver serving CUDA 12.0, whatever toolkit built
// it (docs/cuda.md).
namespace drv = sdk::cuda;
using drv::check;
using drv::driver;

bool built_with_cuda() {
  return true;
}

DeviceGuard::DeviceGuard(int device) : impl_(new drv::DeviceGuard(device)) {}
DeviceGuard::~DeviceGuard() {
  delete static_cast<drv::DeviceGuard*>(impl_);
}

namespace {
drv::OwnStream& own(void* stream) {
  return *static_cast<drv::OwnStream*>(stream);
}
}  // namespace

std::string device_uuid(int device) {
  DeviceGuard guard(device);  // also checks the ordinal against the devices present
  CUdevice dev = 0;
  check(driver().DeviceGet(&dev, device), "cuDeviceGet");
  CUuuid uuid{};
  check(driver().DeviceGetUuid(&uuid, dev), "cuDeviceGetUuid");
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  std::string s = "GPU-";
  static const char* hex = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += hex[b[i] >> 4];
    s += hex[b[i] & 15];
  }
  return s;
}

int device_of(const void* ptr) {
  const auto p = reinterpret_cast<CUdeviceptr>(ptr);
  unsigned int type = 0;
  CUresult r = driver().PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
  if (r == CUDA_ERROR_INVALID_CONTEXT) {  // a thread that never used CUDA: ask from a context
    DeviceGuard guard(0);
    r = driver().PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
  }
  if (r == CUDA_ERROR_INVALID_VALUE || (r == CUDA_SUCCESS && type != CU_MEMORYTYPE_DEVICE))
    fail(WT_ERR_INVALID_ARGUMENT, "pointer {} is not CUDA device memory", ptr);
  check(r, "cuPointerGetAttribute(MEMORY_TYPE)");
  int device = -1;
  check(driver().PointerGetAttribute(&device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p),
        "cuPointerGetAttribute(DEVICE_ORDINAL)");
  return device;
}

Exported export_pointer(const void* ptr) {
  auto e = try_export_pointer(ptr);
  if (!e)
    fail(WT_ERR_DEVICE,
         "cuIpcGetMemHandle refused the allocation of {} (memory from cudaMallocAsync or VMM "
         "pools cannot be shared)",
         ptr);
  return *e;
}

std::optional<Exported> try_export_pointer(const void* ptr) {
  int device = device_of(ptr);
  DeviceGuard guard(device);
  CUdeviceptr base = 0;
  size_t size = 0;
  check(driver().MemGetAddressRange(&base, &size, reinterpret_cast<CUdeviceptr>(ptr)),
        "cuMemGetAddressRange");
  // Pool (cudaMallocAsync) and VMM (cuMemCreate) memory is not for CUDA IPC handles: staged.
  int capable = 1;
  if (driver().PointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                   reinterpret_cast<CUdeviceptr>(ptr)) == CUDA_SUCCESS &&
      capable == 0)
    return std::nullopt;
  CUipcMemHandle h{};
  CUresult r = driver().IpcGetMemHandle(&h, base);
  if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED ||
      r == CUDA_ERROR_NOT_PERMITTED)
    return std::nullopt;
  check(r, "cuIpcGetMemHandle");
  Exported e;
  e.handle_b64 = base64_encode(&h, sizeof h);
  e.allocation_size = size;
  e.offset = reinterpret_cast<CUdeviceptr>(ptr) - base;
  return e;
}

DeviceBuffer::DeviceBuffer(int device, std::size_t size) : size_(size), device_(device) {
  DeviceGuard guard(device);
  CUdeviceptr p = 0;
  check(driver().MemAlloc(&p, size == 0 ? 1 : size), "cuMemAlloc of a packed buffer");
  ptr_ = reinterpret_cast<void*>(p);
  try {
    stream_ = new drv::OwnStream(device);
  } catch (...) {
    driver().MemFree(p);
    throw;
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ == nullptr) return;
  delete &own(stream_);  // synchronises first: no copy still writing
  try {
    DeviceGuard guard(device_);
    driver().MemFree(reinterpret_cast<CUdeviceptr>(ptr_));
  } catch (...) {  // no device to switch to: the context is gone with it
  }
}

void DeviceBuffer::copy_in(std::size_t offset, const void* src, std::size_t n) {
  if (offset > size_ || n > size_ - offset)
    fail(WT_ERR_INTERNAL, "a packed copy of {} bytes at {} overruns a {}-byte buffer", n, offset,
         size_);
  DeviceGuard guard(device_);
  check(driver().MemcpyAsync(reinterpret_cast<CUdeviceptr>(data() + offset),
                             reinterpret_cast<CUdeviceptr>(src), n, own(stream_).get()),
        "cuMemcpyAsync into a packed buffer");
}

void DeviceBuffer::synchronize() {
  own(stream_).synchronize();
}

void synchronize(int device) {
  DeviceGuard guard(device);
  check(driver().CtxSynchronize(), "cuCtxSynchronize");
}

void wait_for(void* stream, int device) {
  DeviceGuard guard(device);
  if (stream != nullptr)
    check(driver().StreamSynchronize(static_cast<CUstream>(stream)), "cuStreamSynchronize");
  else
    check(driver().CtxSynchronize(), "cuCtxSynchronize");
}

Imported::Imported(const std::string& handle_b64, int device) : device_(device) {
  std::string raw = base64_decode(handle_b64, "CUDA IPC handle");
  CUipcMemHandle h{};
  if (raw.size() != sizeof h)
    fail(WT_ERR_INVALID_ARGUMENT, "a CUDA IPC handle is {} bytes, this one decodes to {}", sizeof h,
         raw.size());
  std::memcpy(&h, raw.data(), sizeof h);
  DeviceGuard guard(device);
  CUdeviceptr p = 0;
  check(driver().IpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle");
  ptr_ = reinterpret_cast<void*>(p);
  CUdeviceptr base = 0;
  size_t size = 0;
  if (CUresult r = driver().MemGetAddressRange(&base, &size, p); r != CUDA_SUCCESS) {
    driver().IpcCloseMemHandle(p);
    ptr_ = nullptr;
    check(r, "cuMemGetAddressRange of an opened CUDA IPC handle");
  }
  size_ = size;
}

Imported::~Imported() {
  if (ptr_ == nullptr) return;
  try {
    DeviceGuard guard(device_);
    driver().IpcCloseMemHandle(reinterpret_cast<CUdeviceptr>(ptr_));
  } catch (...) {
  }
}

#else  // built without the CUDA toolkit

namespace {
[[noreturn]] void unsupported() {
  fail(WT_ERR_UNSUPPORTED,
       "this libwt_ipc.so was built without the CUDA toolkit: CUDA memory is unsupported");
}
}  // namespace

bool built_with_cuda() {
  return false;
}
std::string device_uuid(int) {
  unsupported();
}
int device_of(const void*) {
  unsupported();
}
Exported export_pointer(const void*) {
  unsupported();
}
std::optional<Exported> try_export_pointer(const void*) {
  unsupported();
}
DeviceGuard::DeviceGuard(int) {
  unsupported();
}
DeviceGuard::~DeviceGuard() = default;
DeviceBuffer::DeviceBuffer(int, std::size_t) {
  unsupported();
}
DeviceBuffer::~DeviceBuffer() = default;
void DeviceBuffer::copy_in(std::size_t, const void*, std::size_t) {
  unsupported();
}
void DeviceBuffer::synchronize() {
  unsupported();
}
void synchronize(int) {
  unsupported();
}
void wait_for(void*, int) {
  unsupported();
}
Imported::Imported(const std::string&, int) {
  unsupported();
}
Imported::~Imported() = default;

#endif

}  // namespace wt::ipc::cuda
