// host_errors(f) calls f and turned the wt::sdk::Error of code shared with plugins into the host's
// wt::Error. Since 0.3 they are one type, and this is f() itself: call f directly. Kept for
// sources written against 0.2; goes no earlier than 0.4 (docs/abi-policy.md).
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/error.hpp>
#include <wt/sdk/errors.hpp>

namespace wt {

template <typename F>
[[deprecated("wt::sdk::Error is wt::Error since 0.3: call f() directly")]] auto host_errors(F&& f)
    -> decltype(f()) {
  return f();
}

}  // namespace wt
