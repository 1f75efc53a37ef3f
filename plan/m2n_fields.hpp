// Reading the m2n layout's and plan's JSON: what both parsers check of a field, and how they say
// it ("<what>: '<key>' must be in 1..65536, got 0").
#pragma once

#include <wt/sdk/errors.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace wt::m2n::detail {

[[noreturn]] inline void refuse(const std::string& what, const std::string& why) {
  sdk::fail(WT_ERR_INVALID_ARGUMENT, "{}: {}", what, why);
}

// The integer at `key` of object `o`, in [lo, hi].
inline int64_t int_in(const nlohmann::json& o, const char* key, const std::string& what, int64_t lo,
                      int64_t hi) {
  if (!o.is_object() || !o.contains(key)) refuse(what, fmt::format("'{}' is missing", key));
  const auto& v = o.at(key);
  if (!v.is_number_integer()) refuse(what, fmt::format("'{}' must be an integer", key));
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi) refuse(what, fmt::format("'{}' must be in {}..{}, got {}", key, lo, hi, n));
  return n;
}

}  // namespace wt::m2n::detail
