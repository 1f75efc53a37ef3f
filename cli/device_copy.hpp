// Device helpers for the CLI: parsing "cpu" / "cuda:N", and the device-to-host copy wt serve
// uses to hold CUDA-received weights (available when built with the CUDA toolkit).
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <string>

namespace wt::cli {

DLDevice parse_device(const std::string& text);
void copy_device_to_host(void* dst, const DLTensor& src, std::size_t n);

}  // namespace wt::cli
