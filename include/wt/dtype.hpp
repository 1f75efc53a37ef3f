// DLPack dtypes and their names on the wire (torch attribute names: "bfloat16", "float32", ...)
// and in safetensors headers ("BF16", "F32", ...). Header-only: used by libwt and by plugins.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <dlpack/dlpack.h>
#include <wt/dlpack_ops.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace wt {

// DLPack 1.1's code for float8_e4m3fn (kDLFloat8_e4m3fn), which older dlpack.h headers lack:
// the block-FP8 weights an FP8 inference engine holds (1 byte each; see docs/m2n.md).
inline constexpr uint8_t kDLFloat8E4m3fnCode = 10;

struct DtypeName {
  DLDataType dtype;
  std::string_view torch;        // vLLM's dtype_names entry
  std::string_view safetensors;  // safetensors header "dtype"
};

inline constexpr DtypeName kDtypeNames[] = {
    {{kDLFloat, 32, 1}, "float32", "F32"},
    {{kDLFloat, 16, 1}, "float16", "F16"},
    {{kDLBfloat, 16, 1}, "bfloat16", "BF16"},
    {{kDLFloat, 64, 1}, "float64", "F64"},
    {{kDLInt, 8, 1}, "int8", "I8"},
    {{kDLInt, 16, 1}, "int16", "I16"},
    {{kDLInt, 32, 1}, "int32", "I32"},
    {{kDLInt, 64, 1}, "int64", "I64"},
    {{kDLUInt, 8, 1}, "uint8", "U8"},
    {{kDLFloat8E4m3fnCode, 8, 1}, "float8_e4m3fn", "F8_E4M3"},
};

inline std::optional<DLDataType> dtype_from_torch_name(std::string_view name) {
  for (const auto& d : kDtypeNames)
    if (d.torch == name) return d.dtype;
  return std::nullopt;
}

inline std::optional<DLDataType> dtype_from_safetensors_name(std::string_view name) {
  for (const auto& d : kDtypeNames)
    if (d.safetensors == name) return d.dtype;
  return std::nullopt;
}

// "float32" etc.; "unknown" for a dtype wt does not name.
inline std::string_view torch_name(DLDataType t) {
  for (const auto& d : kDtypeNames)
    if (d.dtype == t) return d.torch;
  return "unknown";
}

inline std::string_view safetensors_name(DLDataType t) {
  for (const auto& d : kDtypeNames)
    if (d.dtype == t) return d.safetensors;
  return "unknown";
}

inline bool is_known_dtype(DLDataType t) {
  return torch_name(t) != "unknown";
}

inline std::size_t element_size(DLDataType t) {
  return static_cast<std::size_t>(t.bits) * t.lanes / 8;
}

// Product of the dims; a 0-dim tensor has one element. Returns false on overflow or negative dims.
inline bool checked_numel(const int64_t* shape, int32_t ndim, uint64_t* out) {
  uint64_t n = 1;
  for (int32_t i = 0; i < ndim; ++i) {
    if (shape[i] < 0) return false;
    if (shape[i] != 0 && n > UINT64_MAX / static_cast<uint64_t>(shape[i])) return false;
    n *= static_cast<uint64_t>(shape[i]);
  }
  *out = n;
  return true;
}

// Bytes of a dense tensor of this shape and dtype. Returns false on negative dims, or when the
// element count or the byte count overflows 64 bits (a [2^61+1] float64 must not pass as 8 bytes).
inline bool checked_nbytes(const int64_t* shape, int32_t ndim, DLDataType dtype, uint64_t* out) {
  uint64_t numel = 0;
  if (!checked_numel(shape, ndim, &numel)) return false;
  const uint64_t es = element_size(dtype);
  if (es != 0 && numel > UINT64_MAX / es) return false;
  *out = numel * es;
  return true;
}

}  // namespace wt
