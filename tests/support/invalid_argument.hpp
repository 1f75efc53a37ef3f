// The message of the refusal a call makes: what the plan and layout tests check refusals with.
#pragma once

#include <wt/sdk/errors.hpp>

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace wt::test {

// Runs f and returns the message of the sdk::Error it throws, which must have the code
// WT_ERR_INVALID_ARGUMENT; a test failure (and "") if it throws none.
inline std::string invalid_argument_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace wt::test
