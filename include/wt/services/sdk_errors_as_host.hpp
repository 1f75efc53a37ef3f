// Code the host shares with plugins (wt/sdk/cuda_driver.hpp, for one) reports wt::sdk::Error; the
// host's own libraries and programs speak wt::Error. host_errors(f) calls f and turns the one into
// the other, keeping the code and the message.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/error.hpp>
#include <wt/sdk/errors.hpp>

namespace wt {

template <typename F>
auto host_errors(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const sdk::Error& e) {
    throw Error(e.code(), e.what());
  }
}

}  // namespace wt
