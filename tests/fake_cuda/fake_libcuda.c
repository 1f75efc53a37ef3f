/* A stand-in for the NVIDIA driver's libcuda.so.1, for tests on any machine: it serves the driver
 * API version in WT_FAKE_CUDA_VERSION (12020, CUDA 12.2 as an r535 driver serves, by default) and
 * finds no device. What wt says to a driver too old, or to a driver without a GPU, is then tested
 * without either at hand (tests/cuda_driver_test.cpp). Only what wt asks for before cuInit exists.
 */
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
enum { kSuccess = 0, kNoDevice = 100, kNotFound = 500 };

static CUresult driver_get_version(int* version) {
  const char* v = getenv("WT_FAKE_CUDA_VERSION");
  *version = v ? atoi(v) : 12020;
  return kSuccess;
}

static CUresult init(unsigned int flags) {
  (void)flags;
  return kNoDevice;
}

static CUresult get_error_string(CUresult r, const char** text) {
  *text = r == kNoDevice ? "no CUDA-capable device is detected" : "unknown error";
  return kSuccess;
}

static CUresult get_error_name(CUresult r, const char** name) {
  *name = r == kNoDevice ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
  return kSuccess;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress(const char* symbol, void** pfn,
                                                                 int version,
                                                                 unsigned long long flags) {
  (void)version, (void)flags;
  *pfn = NULL;
  if (strcmp(symbol, "cuDriverGetVersion") == 0) *pfn = (void*)&driver_get_version;
  if (strcmp(symbol, "cuInit") == 0) *pfn = (void*)&init;
  if (strcmp(symbol, "cuGetErrorString") == 0) *pfn = (void*)&get_error_string;
  if (strcmp(symbol, "cuGetErrorName") == 0) *pfn = (void*)&get_error_name;
  return *pfn ? kSuccess : kNotFound;
}
