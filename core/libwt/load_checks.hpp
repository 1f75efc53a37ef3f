// libwt internals (not installed) shared by registry.cpp, load_checks.cpp and isolated_scan.cpp:
// the validation of the table wt_plugin_get returns (defined in load_checks.cpp, next to the
// fault-free memory reads it is built on) and the list of plugin files on the search path
// (defined in registry.cpp, used by both Registry::scan() and Registry::scan_isolated()).
// check_plugin_file(), the checks made before dlopen, is public: see wt/registry.hpp.
#pragma once

#include <wt/wt_plugin.h>

#include <cstdint>
#include <string>
#include <vector>

namespace wt::detail {

// Checks the table wt_plugin_get returned, touching the plugin's memory only through
// safe_copy(); `api` is the plugin's pointer, already known to be non-NULL. Throws wt::Error
// (WT_ERR_INCOMPATIBLE) naming `path` and what is wrong.
void validate_api(const wt_plugin_api* api, uint32_t plugin_abi, const std::string& path,
                  const std::string& backend);

// A plugin file on the search path; shadowed when an earlier directory has the same backend.
struct Candidate {
  std::string backend, path;
  bool shadowed = false;
};

// Every libwt_*.so on the path, in search order; a backend seen in an earlier directory shadows.
std::vector<Candidate> candidates(const std::vector<std::string>& dirs);

}  // namespace wt::detail
