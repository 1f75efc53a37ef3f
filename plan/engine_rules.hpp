// The rules of an engine-format layout, as a layout file or an init info states them
// (engine_layout.hpp says what each does).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace wt::m2n {

struct EngineRule {
  enum class Kind { kFuse, kStack, kTie };
  Kind kind = Kind::kFuse;
  std::string into;                // the engine parameter's name pattern (the tie's second name)
  std::vector<std::string> parts;  // the trainer parameters' patterns (the tie's `to`: one name)
  int64_t experts = 0;             // kStack
  bool operator==(const EngineRule&) const = default;
};

// Reads and checks a rule list's form; `what` names it in errors (WT_ERR_INVALID_ARGUMENT).
std::vector<EngineRule> engine_rules_from_json(const nlohmann::json& j, const std::string& what);
nlohmann::json engine_rules_to_json(const std::vector<EngineRule>& rules);

}  // namespace wt::m2n
