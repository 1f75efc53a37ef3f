// YAML -> JSON, as libwt reads YAML init infos and wt launch reads configs: plain scalars are typed
// by the YAML 1.2 core schema, quoted ones stay strings.
#pragma once

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

namespace wt {

// Plain scalars become booleans, integers, floats or null when they look like one; quoted
// scalars stay strings.
nlohmann::json yaml_to_json(const YAML::Node& node);

}  // namespace wt
