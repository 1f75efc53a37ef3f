// InitInfo: the trainer-side configuration of one backend, e.g.
//   {"backend": "ipc", "rank": 0, "packed": true}
// The "backend" key chooses the plugin; the rest is parsed strictly by that plugin's own parser
// (unknown keys and wrong types are errors naming the key). Building an InitInfo loads nothing:
// the plugin is loaded, and the fields parsed, on first use (trainer_init, rank(), to_json()).
#pragma once

#include <wt/requires_cxx20.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace wt {

class Plugin;
struct ParsedInitInfo;

class InitInfo {
 public:
  // `origin` names where the text came from (a file, "--init-info") in error messages.
  static InitInfo from_json(std::string_view json_text, const std::string& origin = "init_info");
  // In libwt_yaml (CMake target wt::yaml): link it to use this one.
  static InitInfo from_yaml(std::string_view yaml_text, const std::string& origin = "init_info");
  static InitInfo from_object(const nlohmann::json& object,
                              const std::string& origin = "init_info");

  const std::string& backend() const { return backend_; }
  // The backend's own fields, as given (without "backend").
  const nlohmann::json& fields() const { return fields_; }
  const std::string& origin() const { return origin_; }

  // Parsed by the plugin (loading it if needed); throw wt::Error on invalid fields.
  int64_t rank() const;
  bool is_sender() const;
  // Canonical JSON from the plugin: every field with defaults filled in, plus "backend".
  nlohmann::json to_json() const;

  // For libwt: the plugin and its parsed object.
  const ParsedInitInfo& parsed() const;

 private:
  InitInfo() = default;
  std::string backend_;
  nlohmann::json fields_;
  std::string origin_;
  mutable std::shared_ptr<const ParsedInitInfo> parsed_;
};

}  // namespace wt
