// The exception libwt throws: a stable status code (wt_status) plus a sentence a user can act on.
#pragma once

#include <wt/requires_cxx20.hpp>

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

// An error about one field of an init info: field() is its top-level key, as the plugin named it
// (ABI 2's parse_json field out-parameter), so a caller can point at the line of a config file.
class FieldError : public Error {
 public:
  FieldError(wt_status code, const std::string& message, std::string field)
      : Error(code, message), field_(std::move(field)) {}
  const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

// "WT_ERR_TIMEOUT" etc.; "WT_ERR_UNKNOWN(<n>)" for a code this build does not know.
std::string status_name(wt_status code);

}  // namespace wt
