// Equality for DLPack's DLDataType and DLDevice. They are declared in the global namespace, where
// DLPack declares the types, so argument-dependent lookup finds them from any code, a plugin's
// anonymous namespace included, without a using-declaration. A program that already defines these
// operators itself can define WT_NO_DLPACK_OPERATORS before including wt's headers.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <dlpack/dlpack.h>

#ifndef WT_NO_DLPACK_OPERATORS
// (C++20 derives != from ==.)
inline constexpr bool operator==(const DLDataType& a, const DLDataType& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}
inline constexpr bool operator==(const DLDevice& a, const DLDevice& b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}
#endif
