// The one exception wt throws, in libwt, its services and (as wt::sdk::Error, the same type) in
// plugins: a stable status code (wt_status) plus a sentence a user can act on.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/wt_plugin.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace wt {

// field(): when the error is about one field of an init info, its top-level key (as a plugin
// names it in ABI 2's parse_json field out-parameter), so a caller can point at the line of a
// config file; empty otherwise.
class Error : public std::runtime_error {
 public:
  Error(wt_status code, const std::string& message, std::string field = {})
      : std::runtime_error(message), code_(code), field_(std::move(field)) {}
  wt_status code() const noexcept { return code_; }
  const std::string& field() const noexcept { return field_; }

 private:
  wt_status code_;
  std::string field_;
};

// An Error about one field, by its type: what libwt throws when a plugin's parser named the field.
class FieldError : public Error {
 public:
  FieldError(wt_status code, const std::string& message, std::string field)
      : Error(code, message, std::move(field)) {}
};

// "WT_ERR_TIMEOUT" etc.; "WT_ERR_UNKNOWN(<n>)" for a code this build does not know.
std::string status_name(wt_status code);

}  // namespace wt
