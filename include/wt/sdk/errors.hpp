// Plugin-side error handling: throw wt::sdk::Error inside, return a wt_status at the boundary.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/wt_plugin.h>
#include <wt/error.hpp>

#include <fmt/format.h>

#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace wt::sdk {

// An error with a stable ABI code. Everything a plugin throws at a user should be one of these.
// field(): the top-level key of the init info the error is about, if any (ABI 2 hands it to the
// host as data, so `wt launch` can point at its line in a config file). wt's one error type
// (<wt/error.hpp>): the host and a plugin's code throw and catch the same class.
using Error = ::wt::Error;

template <typename... Args>
[[noreturn]] void fail(wt_status code, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(code, fmt::format(f, std::forward<Args>(args)...));
}

// fail() about one field: `field` is its top-level key (for "a.b" or "a[3]", pass "a").
template <typename... Args>
[[noreturn]] void fail_field(const std::string& field, wt_status code,
                             fmt::format_string<Args...> f, Args&&... args) {
  throw Error(code, fmt::format(f, std::forward<Args>(args)...), field);
}

// "... field 'name' ..." -> "name" (the top-level key of "a.b" or "a[3]"), for errors that name
// a field only in their text, as plugins of ABI 1 did.
inline std::string field_named_in(const std::string& message) {
  auto p = message.find("field '");
  if (p == std::string::npos) return "";
  p += 7;
  auto end = message.find_first_of("'.[", p);
  return end == std::string::npos ? "" : message.substr(p, end - p);
}

// The message of a caught exception (e.g. for client.end_weight_update in a catch (...) block).
inline std::string message_of(std::exception_ptr e) noexcept {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

// Copies a message into a caller-provided buffer, truncating and always terminating.
inline void write_message(char* buf, std::size_t cap, const std::string& msg) noexcept {
  if (buf == nullptr || cap == 0) return;
  std::size_t n = msg.size() < cap - 1 ? msg.size() : cap - 1;
  std::memcpy(buf, msg.data(), n);
  buf[n] = '\0';
}

// Runs f() and converts every exception into a status plus a message. This is what keeps C++
// exceptions from ever crossing the ABI.
template <typename F>
wt_status guard(std::string& message, F&& f) noexcept {
  try {
    f();
    return WT_OK;
  } catch (const Error& e) {
    message = e.what();
    return e.code();
  } catch (const std::bad_alloc&) {
    message = "out of memory";
    return WT_ERR_SYSTEM;
  } catch (const std::exception& e) {
    message = std::string("internal error: ") + e.what();
    return WT_ERR_INTERNAL;
  } catch (...) {
    message = "internal error: unknown exception";
    return WT_ERR_INTERNAL;
  }
}

// guard() for create-style calls, whose message goes into a caller buffer.
template <typename F>
wt_status guard_into(char* err, std::size_t err_cap, F&& f) noexcept {
  std::string message;
  wt_status s = guard(message, std::forward<F>(f));
  if (s != WT_OK) write_message(err, err_cap, message);
  return s;
}

}  // namespace wt::sdk
