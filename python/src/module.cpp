// wt._wt: the extension behind the Python package `wt` (python/wt/__init__.py).
#include "bindings.hpp"
#include "launcher_group.hpp"
#include "py_errors.hpp"

#include <wt/version.hpp>

PYBIND11_MODULE(_wt, m) {
  m.doc() = "wt's C++ core: trainer and worker engines, the reference receiver, clients";
  wt::python::register_translator();
  wt::python::bind_clients(m);
  wt::python::bind_receiver(m);
  wt::python::bind_trainer(m);
  wt::python::bind_worker(m);
  wt::python::bind_tools(m);
  wt::python::bind_launcher_group(m);
  wt::python::bind_engine_session(m);
  m.attr("__version__") = WT_VERSION_STRING;
}
