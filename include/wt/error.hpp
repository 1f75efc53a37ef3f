// The exception libwt throws: a stable status code (wt_status) plus a sentence a user can act on.
#pragma once

#include <wt/wt_plugin.h>

#include <stdexcept>
#include <string>

namespace wt {

class Error : public std::runtime_error {
 public:
  Error(wt_status code, const std::string& message) : std::runtime_error(message), code_(code) {}
  wt_status code() const noexcept { return code_; }

 private:
  wt_status code_;
};

// "WT_ERR_TIMEOUT" etc.; "WT_ERR_UNKNOWN(<n>)" for a code this build does not know.
std::string status_name(wt_status code);

}  // namespace wt
