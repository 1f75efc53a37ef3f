#include "cuda_ipc.hpp"

#include "ipc_wire.hpp"

#include <wt/sdk/errors.hpp>

#ifdef WT_IPC_WITH_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

#include <cstring>

namespace wt::ipc::cuda {

using sdk::fail;

#ifdef WT_IPC_WITH_CUDA

namespace {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear the sticky-free error state
  wt_status code = (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
                    e == cudaErrorInitializationError || e == cudaErrorStubLibrary)
                       ? WT_ERR_UNSUPPORTED
                       : WT_ERR_DEVICE;
  fail(code, "{} failed: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

int current_device() {
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

// cuMemGetAddressRange through the runtime's driver entry point, so the plugin does not link
// libcuda and still loads on machines without a driver.
using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
GetAddressRange address_range_fn() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  check(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                         &status),
        "cudaGetDriverEntryPointByVersion(cuMemGetAddressRange)");
  if (fn == nullptr || status != cudaDriverEntryPointSuccess)
    fail(WT_ERR_UNSUPPORTED, "the CUDA driver does not provide cuMemGetAddressRange");
  return reinterpret_cast<GetAddressRange>(fn);
}

CUresult address_range(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  static const GetAddressRange fn = address_range_fn();  // a function pointer, not state
  return fn(base, size, p);
}

}  // namespace

bool built_with_cuda() {
  return true;
}

DeviceGuard::DeviceGuard(int device) {
  int now = current_device();
  if (now != device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    previous_ = now;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

std::string device_uuid(int device) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
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
  cudaPointerAttributes attr{};
  check(cudaPointerGetAttributes(&attr, ptr), "cudaPointerGetAttributes");
  if (attr.type != cudaMemoryTypeDevice)
    fail(WT_ERR_INVALID_ARGUMENT, "pointer {} is not device memory from cudaMalloc", ptr);
  return attr.device;
}

Exported export_pointer(const void* ptr) {
  auto e = try_export_pointer(ptr);
  if (!e)
    fail(WT_ERR_DEVICE,
         "cudaIpcGetMemHandle refused the allocation of {} (memory from cudaMallocAsync or VMM "
         "pools cannot be shared)",
         ptr);
  return *e;
}

std::optional<Exported> try_export_pointer(const void* ptr) {
  int device = device_of(ptr);
  DeviceGuard guard(device);
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult r = address_range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr));
  if (r != CUDA_SUCCESS)
    fail(WT_ERR_DEVICE, "cuMemGetAddressRange failed with CUresult {}", static_cast<int>(r));
  cudaIpcMemHandle_t h{};
  cudaError_t err = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base));
  if (err == cudaErrorInvalidValue || err == cudaErrorNotSupported) {
    cudaGetLastError();  // not sticky: clear it
    return std::nullopt;
  }
  check(err, "cudaIpcGetMemHandle");
  Exported e;
  e.handle_b64 = base64_encode(&h, sizeof h);
  e.allocation_size = size;
  e.offset = reinterpret_cast<CUdeviceptr>(ptr) - base;
  return e;
}

DeviceBuffer::DeviceBuffer(int device, std::size_t size) : size_(size), device_(device) {
  DeviceGuard guard(device);
  check(cudaMalloc(&ptr_, size == 0 ? 1 : size), "cudaMalloc of a packed buffer");
  cudaStream_t s = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    cudaFree(ptr_);
    ptr_ = nullptr;
    check(e, "cudaStreamCreateWithFlags");
  }
  stream_ = s;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ == nullptr) return;
  try {
    DeviceGuard guard(device_);
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));  // no copy still writing
    cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
    cudaFree(ptr_);
  } catch (...) {  // no device to switch to: the context is gone with it
  }
}

void DeviceBuffer::copy_in(std::size_t offset, const void* src, std::size_t n) {
  if (offset > size_ || n > size_ - offset)
    fail(WT_ERR_INTERNAL, "a packed copy of {} bytes at {} overruns a {}-byte buffer", n, offset,
         size_);
  DeviceGuard guard(device_);
  check(cudaMemcpyAsync(data() + offset, src, n, cudaMemcpyDefault,
                        static_cast<cudaStream_t>(stream_)),
        "cudaMemcpyAsync into a packed buffer");
}

void DeviceBuffer::synchronize() {
  DeviceGuard guard(device_);
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
}

void synchronize(int device) {
  DeviceGuard guard(device);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void synchronize_stream(void* stream) {
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
}

void wait_for(void* stream, int device) {
  if (stream != nullptr)
    synchronize_stream(stream);
  else
    synchronize(device);
}

Imported::Imported(const std::string& handle_b64, int device) : device_(device) {
  std::string raw = base64_decode(handle_b64, "CUDA IPC handle");
  cudaIpcMemHandle_t h{};
  if (raw.size() != sizeof h)
    fail(WT_ERR_INVALID_ARGUMENT, "a CUDA IPC handle is {} bytes, this one decodes to {}", sizeof h,
         raw.size());
  std::memcpy(&h, raw.data(), sizeof h);
  DeviceGuard guard(device);
  check(cudaIpcOpenMemHandle(&ptr_, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
  CUdeviceptr base = 0;
  size_t size = 0;
  if (address_range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr_)) != CUDA_SUCCESS) {
    cudaIpcCloseMemHandle(ptr_);
    ptr_ = nullptr;
    fail(WT_ERR_DEVICE, "cuMemGetAddressRange of an opened CUDA IPC handle failed");
  }
  size_ = size;
}

Imported::~Imported() {
  if (ptr_ == nullptr) return;
  try {
    DeviceGuard guard(device_);
    cudaIpcCloseMemHandle(ptr_);
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
void synchronize_stream(void*) {
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
