// CUDA memory for the ipc backend: cudaIpcMemHandle export/import keyed by GPU UUID. Built only
// when the CUDA toolkit is found; otherwise every call fails with WT_ERR_UNSUPPORTED. With the
// toolkit but no GPU (or no driver) calls fail with WT_ERR_UNSUPPORTED naming the CUDA error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace wt::ipc::cuda {

bool built_with_cuda();

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" of a device index.
std::string device_uuid(int device);

// The device that holds `ptr`, for pointers from cudaMalloc.
int device_of(const void* ptr);

struct Exported {
  std::string handle_b64;  // cudaIpcMemHandle_t
  uint64_t allocation_size = 0;
  uint64_t offset = 0;  // of ptr inside its allocation
};
// Exports the allocation that contains `ptr`.
Exported export_pointer(const void* ptr);

// A device buffer for packed mode, exported once.
class DeviceBuffer {
 public:
  DeviceBuffer(int device, std::size_t size);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  unsigned char* data() const { return static_cast<unsigned char*>(ptr_); }
  std::size_t size() const { return size_; }
  int device() const { return device_; }

 private:
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
  int device_ = 0;
};

// cudaMemcpy (any direction), a device-wide synchronize, and waiting for one stream (the one that
// produced the tensors, when the host names it: cheaper than the whole device).
void copy(void* dst, const void* src, std::size_t n);
void synchronize(int device);
void synchronize_stream(void* stream);

// A handle opened in this process (cudaIpcOpenMemHandle); closed on destruction.
class Imported {
 public:
  Imported(const std::string& handle_b64, int device);
  ~Imported();
  Imported(const Imported&) = delete;
  Imported& operator=(const Imported&) = delete;
  unsigned char* base() const { return static_cast<unsigned char*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  int device_ = 0;
};

}  // namespace wt::ipc::cuda
