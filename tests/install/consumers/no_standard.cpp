// Built with no C++ standard set by the project: wt::wt's usage requirement makes it C++20.
#include <wt/wt.hpp>

#include <cstdio>

static_assert(__cplusplus >= 202002L, "wt::wt did not bring C++20 to its consumer");

int main() {
  auto info = wt::InitInfo::from_json(R"({"backend": "ipc", "rank": 0})");
  std::printf("%s %s\n", WT_VERSION_STRING, info.backend().c_str());
  return 0;
}
