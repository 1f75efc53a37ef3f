// Running real processes from tests: the command's exit status and its combined output.
#pragma once

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <string>

namespace wt::test {

struct ProcessResult {
  int exit_code = -1;
  std::string output;
};

inline ProcessResult run_process(const std::string& command) {
  ProcessResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace wt::test
