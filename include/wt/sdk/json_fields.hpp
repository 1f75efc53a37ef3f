// Strict reading of JSON objects: every key is either read or reported as unknown, every value
// has exactly the expected type, and every error names the field. This is how both init_info and
// update_info payloads are parsed.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/json_parse.hpp>
#include <wt/sdk/errors.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace wt::sdk {

inline std::string json_type_name(const nlohmann::json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

class FieldReader {
 public:
  // what: how errors name the object, e.g. "init_info for backend 'ipc'".
  FieldReader(const nlohmann::json& obj, std::string what) : obj_(obj), what_(std::move(what)) {
    if (!obj_.is_object())
      fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: expected a JSON object, got {}", what_,
           json_type_name(obj_));
  }

  bool has(const std::string& key) const { return obj_.contains(key); }
  // A key that is allowed but read elsewhere.
  void allow(const std::string& key) { seen_.insert(key); }

  const nlohmann::json& raw(const std::string& key) {
    seen_.insert(key);
    if (!obj_.contains(key))
      fail_field(key, WT_ERR_INVALID_ARGUMENT, "invalid {}: missing field '{}'", what_, key);
    return obj_.at(key);
  }

  bool get_bool(const std::string& key) {
    const auto& v = raw(key);
    if (!v.is_boolean()) type_error(key, "a boolean", v);
    return v.get<bool>();
  }
  int64_t get_int(const std::string& key) {
    const auto& v = raw(key);
    if (!v.is_number_integer()) type_error(key, "an integer", v);
    return v.get<int64_t>();
  }
  // Strings cross the C ABI as NUL-terminated text, so one holding a NUL would be cut short
  // there ("a\0x" and "a\0y" would both be "a"): refused.
  std::string get_string(const std::string& key) {
    const auto& v = raw(key);
    if (!v.is_string()) type_error(key, "a string", v);
    if (v.get_ref<const std::string&>().find('\0') != std::string::npos)
      fail_field(key, WT_ERR_INVALID_ARGUMENT, "invalid {}: field '{}' holds a NUL character",
                 what_, key);
    return v.get<std::string>();
  }
  std::vector<std::string> get_string_list(const std::string& key) {
    const auto& v = raw(key);
    if (!v.is_array()) type_error(key, "a list of strings", v);
    std::vector<std::string> out;
    out.reserve(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) element_error(key, i, "a string", v[i]);
      if (v[i].get_ref<const std::string&>().find('\0') != std::string::npos)
        fail_field(key, WT_ERR_INVALID_ARGUMENT, "invalid {}: field '{}[{}]' holds a NUL character",
                   what_, key, i);
      out.push_back(v[i].get<std::string>());
    }
    return out;
  }
  std::vector<int64_t> get_int_list(const std::string& key) {
    const auto& v = raw(key);
    if (!v.is_array()) type_error(key, "a list of integers", v);
    return int_list(v, key);
  }
  std::vector<std::vector<int64_t>> get_int_list_list(const std::string& key) {
    const auto& v = raw(key);
    if (!v.is_array()) type_error(key, "a list of integer lists", v);
    std::vector<std::vector<int64_t>> out;
    out.reserve(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_array()) element_error(key, i, "a list of integers", v[i]);
      out.push_back(int_list(v[i], fmt::format("{}[{}]", key, i)));
    }
    return out;
  }

  // An integer in [lo, hi].
  int64_t get_int_in(const std::string& key, int64_t lo, int64_t hi) {
    const int64_t n = get_int(key);
    if (n < lo || n > hi) fail_about(key, "field '{}' must be in {}..{}, got {}", key, lo, hi, n);
    return n;
  }
  // An array, its elements for the caller to read.
  const nlohmann::json& get_array(const std::string& key) {
    const auto& v = raw(key);
    if (!v.is_array()) type_error(key, "an array", v);
    return v;
  }
  // An object, read by a reader of its own that names it `what` in its errors (the object must
  // outlive that reader, as this one's must).
  FieldReader get_object(const std::string& key, std::string what) {
    const auto& v = raw(key);
    if (!v.is_object()) type_error(key, "an object", v);
    return FieldReader(v, std::move(what));
  }

  // Refuses now any key not among `keys`, as finish() would at the end: a misspelt required key
  // is then named as unknown, not reported as missing.
  void only(std::initializer_list<std::string_view> keys) const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it)
      if (std::find(keys.begin(), keys.end(), it.key()) == keys.end()) {
        std::string known;
        for (const auto k : keys) known += (known.empty() ? "" : ", ") + std::string(k);
        fail_field(it.key(), WT_ERR_INVALID_ARGUMENT,
                   "invalid {}: unknown field '{}' (known fields: {})", what_, it.key(), known);
      }
  }

  bool opt_bool(const std::string& key, bool def) {
    return present(key) ? get_bool(key) : (seen_.insert(key), def);
  }
  int64_t opt_int(const std::string& key, int64_t def) {
    return present(key) ? get_int(key) : (seen_.insert(key), def);
  }
  std::string opt_string(const std::string& key, std::string def) {
    return present(key) ? get_string(key) : (seen_.insert(key), def);
  }

  // Rejects every key that was neither read nor allowed.
  void finish() const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (seen_.count(it.key()) == 0) {
        std::string known;
        for (const auto& k : seen_) known += (known.empty() ? "" : ", ") + k;
        fail_field(it.key(), WT_ERR_INVALID_ARGUMENT,
                   "invalid {}: unknown field '{}' (known fields: {})", what_, it.key(), known);
      }
    }
  }

  const std::string& what() const { return what_; }
  // A failure about `key` found after reading it (a range, a combination of fields).
  template <typename... Args>
  [[noreturn]] void fail_about(const std::string& key, fmt::format_string<Args...> f,
                               Args&&... args) const {
    fail_field(key, WT_ERR_INVALID_ARGUMENT, "invalid {}: {}", what_,
               fmt::format(f, std::forward<Args>(args)...));
  }

 private:
  // An explicit null counts as absent for optional fields, as in vLLM's dataclasses.
  bool present(const std::string& key) const {
    return obj_.contains(key) && !obj_.at(key).is_null();
  }

  std::vector<int64_t> int_list(const nlohmann::json& v, const std::string& key) const {
    std::vector<int64_t> out;
    out.reserve(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer()) element_error(key, i, "an integer", v[i]);
      out.push_back(v[i].get<int64_t>());
    }
    return out;
  }
  [[noreturn]] void type_error(const std::string& key, const char* want,
                               const nlohmann::json& got) const {
    fail_field(top_key(key), WT_ERR_INVALID_ARGUMENT, "invalid {}: field '{}' must be {}, got {}",
               what_, key, want, json_type_name(got));
  }
  [[noreturn]] void element_error(const std::string& key, std::size_t i, const char* want,
                                  const nlohmann::json& got) const {
    fail_field(top_key(key), WT_ERR_INVALID_ARGUMENT,
               "invalid {}: field '{}[{}]' must be {}, got {}", what_, key, i, want,
               json_type_name(got));
  }
  static std::string top_key(const std::string& key) { return key.substr(0, key.find('[')); }

  const nlohmann::json& obj_;
  std::string what_;
  std::set<std::string> seen_;
};

// Parses JSON text within wt's depth and size limits (<wt/json_parse.hpp>), turning every
// failure into WT_ERR_INVALID_ARGUMENT naming `what`.
inline nlohmann::json parse_json_text(const char* text, const std::string& what) {
  if (text == nullptr) fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: NULL JSON text", what);
  try {
    return parse_json(text);
  } catch (const JsonError& e) {
    fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: {}", what, e.what());
  }
}

}  // namespace wt::sdk
