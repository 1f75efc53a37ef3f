// Links libwt alone: the registry's search path ends at the installed plugin directory.
#include <wt/engine.hpp>
#include <wt/registry.hpp>

#include <cstdio>

int main() {
  for (const auto& d : wt::Registry::instance().search_path()) std::printf("%s\n", d.c_str());
  return 0;
}
