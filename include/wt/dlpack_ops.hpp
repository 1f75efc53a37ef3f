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

namespace wt {
// Deprecated since wt 0.3, to be removed in a later release (docs/abi-policy.md, "Source
// compatibility"). wt 0.1 declared DLDataType's == here, so plugin code wrote
// `using wt::operator==;`; 0.2 moved it to the global namespace above and dropped this name, which
// broke that line. It is back so that the line compiles: a template, so that wherever the global
// operator is visible it is the better match and this one is never called (a using-declaration
// cannot carry a deprecation, so only a call naming wt::operator== warns).
template <int = 0>
[[deprecated(
    "DLPack's == is found without a using-declaration since wt 0.2: delete "
    "`using wt::operator==;` and write a == b")]] inline constexpr bool
operator==(const DLDataType& a, const DLDataType& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}
}  // namespace wt
