// CUDA memory for the ipc backend: CUDA IPC handle export/import keyed by GPU UUID, through the
// driver API reached at run time (wt/sdk/cuda_driver.hpp). Built only when the CUDA toolkit's
// headers are found; otherwise every call fails with WT_ERR_UNSUPPORTED. Without a driver, with
// one too old, or without a GPU, calls fail with WT_ERR_UNSUPPORTED saying which.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace wt::ipc::cuda {

bool built_with_cuda();

// Makes `device` the calling thread's current device for its scope and restores the one the caller
// had: every CUDA call of the plugin runs under one, so a trainer's thread keeps its device and no
// stray context appears on GPU 0.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  void* impl_ = nullptr;  // sdk::cuda::DeviceGuard
};

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" of a device index.
std::string device_uuid(int device);

// The device that holds `ptr`, for pointers from cudaMalloc.
int device_of(const void* ptr);

struct Exported {
  std::string handle_b64;  // CUipcMemHandle (the runtime's cudaIpcMemHandle_t)
  uint64_t allocation_size = 0;
  uint64_t offset = 0;  // of ptr inside its allocation
};
// Exports the allocation that contains `ptr`.
Exported export_pointer(const void* ptr);
// The same, or nullopt for memory CUDA IPC cannot share (cudaMallocAsync pools, cuMemCreate /
// expandable segments): the caller then stages a copy in cudaMalloc memory.
std::optional<Exported> try_export_pointer(const void* ptr);

// A device buffer for packed mode, exported once, with a non-blocking stream of its own on its
// device: packing copies are queued there (copy_in) and waited for before the buffer is exported
// (synchronize), never ordered by the legacy default stream alone.
class DeviceBuffer {
 public:
  DeviceBuffer(int device, std::size_t size);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  unsigned char* data() const { return static_cast<unsigned char*>(ptr_); }
  std::size_t size() const { return size_; }
  int device() const { return device_; }
  // Queues a copy of n bytes (any memory kind) to data() + offset on this buffer's stream.
  void copy_in(std::size_t offset, const void* src, std::size_t n);
  // Returns when every copy queued so far is done.
  void synchronize();

 private:
  void* ptr_ = nullptr;
  void* stream_ = nullptr;  // sdk::cuda::OwnStream
  std::size_t size_ = 0;
  int device_ = 0;
};

// A device-wide synchronize, and waiting for one stream (the one that produced the tensors, or
// the model's, when the host names it: cheaper than the whole device). wait_for(null, d) waits
// for the whole device d: with no stream named, work may be queued on any of them.
void synchronize(int device);
void wait_for(void* stream, int device);

// A handle opened in this process (cuIpcOpenMemHandle); closed on destruction.
class Imported {
 public:
  Imported(const std::string& handle_b64, int device);
  ~Imported();
  Imported(const Imported&) = delete;
  Imported& operator=(const Imported&) = delete;
  unsigned char* base() const { return static_cast<unsigned char*>(ptr_); }
  // The size of the allocation the handle opened, as the driver reports it: what a wire size is
  // checked against.
  uint64_t size() const { return size_; }

 private:
  void* ptr_ = nullptr;
  uint64_t size_ = 0;
  int device_ = 0;
};

}  // namespace wt::ipc::cuda
