// Per-tensor checksums (xxHash XXH3-64) that both sides compute, so a trainer can verify a sync:
// what a receiver answers GET /weight_checksums with. In libwt itself, so an engine that embeds a
// worker engine answers verification without linking the receiver library.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/wt_plugin.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace wt {

// 16 lowercase hex digits of XXH3-64 over the bytes.
std::string checksum_bytes(const void* data, std::size_t n);

// Of a host tensor's logical bytes in row-major order (strided tensors are gathered first).
std::string checksum_tensor(const DLTensor& t);

}  // namespace wt
