// YAML -> JSON, as libwt reads YAML init infos and wt launch reads configs: plain scalars are typed
// by the YAML 1.2 core schema, quoted ones stay strings.
//
// YAML is read as hostile input: exactly one document, no duplicate keys, keys are scalars, and
// nesting and alias expansion are bounded (a recursive alias `x: &r [*r]` would recurse forever,
// and a few hundred bytes of nested aliases expand to gigabytes). Errors are wt::Error
// (WT_ERR_INVALID_ARGUMENT) reading "<origin>:<line>:<column>: <what is wrong>".
#pragma once

#include <wt/requires_cxx20.hpp>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace wt {

struct YamlLimits {
  std::size_t max_depth = 64;                    // nesting of sequences and mappings
  std::size_t max_nodes = std::size_t{1} << 16;  // nodes after alias expansion
  std::size_t max_file_bytes = std::size_t{16} << 20;
};

// Parses `text` as exactly one YAML document and checks it as above.
YAML::Node load_yaml(std::string_view text, const std::string& origin, const YamlLimits& = {});
// The same for a file: refuses what is not a regular file (a FIFO would block) or too large.
// Throws WT_ERR_NOT_FOUND when it cannot be opened.
YAML::Node load_yaml_file(const std::string& path, const YamlLimits& = {});

// Plain scalars become booleans, integers, floats or null when they look like one; quoted
// scalars stay strings. Enforces the checks above.
nlohmann::json yaml_to_json(const YAML::Node& node, const std::string& origin = "YAML",
                            const YamlLimits& = {});

}  // namespace wt
