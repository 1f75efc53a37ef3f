// wt.plugins(): what `wt plugins` lists, from this process's search path.
#include "bindings.hpp"

#include <wt/registry.hpp>
#include <wt/version.hpp>

#include <pybind11/stl.h>

namespace wt::python {

void bind_tools(py::module_& m) {
  m.def(
      "plugins",
      [] {
        std::vector<PluginInfo> found;
        {
          py::gil_scoped_release r;
          found = Registry::instance().scan();
        }
        py::list out;
        for (const PluginInfo& p : found) {
          py::dict d;
          d["backend"] = p.backend;
          d["path"] = p.path;
          d["usable"] = p.usable;
          d["problem"] = p.problem;
          d["version"] = p.plugin_version;
          d["abi_version"] = p.abi_version;
          d["capabilities"] = p.capabilities;
          d["shadowed"] = p.shadowed;
          out.append(d);
        }
        return out;
      },
      "Every plugin on the search path: backend, path, usable, problem, version, abi_version, "
      "capabilities (WT_CAP_* bits), shadowed.");
  m.def("search_path", [] { return Registry::instance().search_path(); });
  m.def(
      "add_plugin_directory", [](const std::string& d) { Registry::instance().add_directory(d); },
      py::arg("directory"));
}

}  // namespace wt::python
