// `wt plugins`: every plugin on the search path, loaded and checked, no engine created.
// Each file is probed in a child process with a deadline (Registry::scan_isolated), so a plugin
// that crashes or hangs while loading is listed as unusable and the others are still listed.
#include "commands.hpp"

#include <wt/registry.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

namespace wt::cli {
namespace {

std::string caps_text(uint64_t caps) {
  std::vector<std::string> out;
  if (caps & WT_CAP_TRAINER) out.push_back("trainer");
  if (caps & WT_CAP_WORKER) out.push_back("worker");
  if (caps & WT_CAP_HOST_MEMORY) out.push_back("host");
  if (caps & WT_CAP_CUDA_MEMORY) out.push_back("cuda");
  if (caps & WT_CAP_PACKED) out.push_back("packed");
  if (caps & WT_CAP_SPARSE) out.push_back("sparse");
  if (caps & WT_CAP_STREAMING_SOURCE) out.push_back("streaming-source");
  if (caps & WT_CAP_SHARDED_SOURCE) out.push_back("sharded-source");
  std::string s;
  for (auto& c : out) s += (s.empty() ? "" : ",") + c;
  return s.empty() ? "-" : s;
}

}  // namespace

Run add_plugins_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plugins", "List the backend plugins found on the search path");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print a JSON array instead of a table");
  auto timeout = std::make_shared<double>(5.0);
  cmd->add_option("--probe-timeout", *timeout,
                  "Seconds each plugin may take to load before it is reported as hanging")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  return [json, timeout]() {
    auto& reg = Registry::instance();
    auto deadline = std::chrono::milliseconds(std::llround(*timeout * 1000.0));
    auto infos = reg.scan_isolated(deadline);
    if (*json) {
      auto arr = nlohmann::json::array();
      for (auto& i : infos)
        arr.push_back({{"backend", i.backend},
                       {"path", i.path},
                       {"usable", i.usable},
                       {"plugin_version", i.plugin_version},
                       {"abi_version", i.abi_version},
                       {"capabilities", caps_text(i.capabilities)},
                       {"shadowed", i.shadowed},
                       {"problem", i.problem}});
      fmt::print("{}\n", arr.dump(2));
      return 0;
    }
    fmt::print("search path (in order):\n");
    for (auto& d : reg.search_path()) fmt::print("  {}\n", d);
    fmt::print("\n{:<14} {:<9} {:<4} {:<32} {}\n", "BACKEND", "VERSION", "ABI", "CAPABILITIES",
               "PATH");
    for (auto& i : infos) {
      if (i.usable)
        fmt::print("{:<14} {:<9} {:<4} {:<32} {}{}\n", i.backend, i.plugin_version, i.abi_version,
                   caps_text(i.capabilities), i.path,
                   i.shadowed ? "  (shadowed by an earlier directory)" : "");
      else
        fmt::print("{:<14} {:<9} {:<4} {:<32} {}\n    unusable: {}\n", i.backend, "-", "-", "-",
                   i.path, i.problem);
    }
    if (infos.empty()) fmt::print("(no plugins found)\n");
    return 0;
  };
}

}  // namespace wt::cli
