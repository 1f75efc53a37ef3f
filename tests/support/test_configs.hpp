// Config files written by tests, under the build tree's test-configs/ (kept for a look after a
// failure; every run rewrites its own).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

namespace wt::test {

inline std::string write_config(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::path(WT_BUILD_DIR) / "test-configs";
  std::filesystem::create_directories(dir);
  const auto p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

}  // namespace wt::test
