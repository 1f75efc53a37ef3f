#include <wt/yaml_json.hpp>

#include <wt/error.hpp>

#include <charconv>
#include <cstdlib>
#include <regex>
#include <string>

namespace wt {
namespace {

nlohmann::json scalar(const YAML::Node& n) {
  const std::string& v = n.Scalar();
  if (n.Tag() == "!") return v;  // quoted: always a string
  if (v == "true" || v == "True" || v == "TRUE") return true;
  if (v == "false" || v == "False" || v == "FALSE") return false;
  if (v == "null" || v == "~" || v == "Null" || v == "NULL" || v.empty()) return nullptr;
  static const std::regex int_re(R"(^[-+]?[0-9]+$)");
  static const std::regex float_re(R"(^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$)");
  if (std::regex_match(v, int_re)) {
    int64_t x = 0;
    const char* b = v.data() + (v[0] == '+' ? 1 : 0);
    auto r = std::from_chars(b, v.data() + v.size(), x);
    if (r.ec == std::errc()) return x;
    return v;  // out of range: keep the text, the reader reports the type
  }
  if (std::regex_match(v, float_re)) return std::strtod(v.c_str(), nullptr);
  return v;
}

}  // namespace

nlohmann::json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      return scalar(node);
    case YAML::NodeType::Sequence: {
      auto arr = nlohmann::json::array();
      for (const auto& item : node) arr.push_back(yaml_to_json(item));
      return arr;
    }
    case YAML::NodeType::Map: {
      auto obj = nlohmann::json::object();
      for (const auto& kv : node) obj[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return obj;
    }
  }
  return nullptr;
}

}  // namespace wt
