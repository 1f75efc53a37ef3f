// Bytes in CUDA memory for the nccl backends' CUDA path (packed buffers, received tensors), and
// the copies into and out of them, through the driver API (wt/sdk/cuda_driver.hpp). Built without
// the CUDA toolkit, every call fails with WT_ERR_UNSUPPORTED.
#pragma once

#include <cstddef>

namespace wt::plugins {

class DeviceBytes {
 public:
  DeviceBytes() = default;
  DeviceBytes(int device, std::size_t size);
  ~DeviceBytes();
  DeviceBytes(DeviceBytes&& o) noexcept { swap(o); }
  DeviceBytes& operator=(DeviceBytes&& o) noexcept {
    swap(o);
    return *this;
  }
  unsigned char* data() const { return static_cast<unsigned char*>(ptr_); }
  std::size_t size() const { return size_; }

 private:
  void swap(DeviceBytes& o) noexcept;
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
  int device_ = 0;
};

// Queues a copy of n bytes (any memory CUDA can address) on `stream` of `device`.
void copy_async(int device, void* dst, const void* src, std::size_t n, void* stream);
// Waits for `stream` (nullptr: the whole device).
void wait_stream(int device, void* stream);

}  // namespace wt::plugins
