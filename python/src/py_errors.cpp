#include "py_errors.hpp"

#include <fmt/format.h>

namespace wt::python {

py::object as_python(const Error& e, py::object cause) {
  py::object field = py::none();
  if (const auto* f = dynamic_cast<const FieldError*>(&e); f != nullptr && !f->field().empty())
    field = py::str(f->field());
  py::object exc = py::module_::import("wt.errors")
                       .attr("_make")(static_cast<int>(e.code()), status_name(e.code()),
                                      py::str(e.what()), field);
  if (!cause.is_none()) exc.attr("__cause__") = cause;
  return exc;
}

void raise(const Error& e, py::object cause) {
  py::object exc = as_python(e, std::move(cause));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

void register_translator() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::object exc = as_python(e);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });
}

void CallbackFailures::rethrow(py::error_already_set& e, wt_status code,
                               const std::string& context) {
  std::string type = "Exception";
  if (e.type()) type = py::str(e.type().attr("__name__")).cast<std::string>();
  std::string text =
      fmt::format("{}: {}: {}", context, type, py::str(e.value()).cast<std::string>());
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!first_) first_ = e.value();
  }
  // A wt error a callback raised (wt.Aborted from a nested call) keeps its code.
  if (py::isinstance(e.value(), py::module_::import("wt.errors").attr("Error")))
    code = static_cast<wt_status>(e.value().attr("code").cast<int>());
  throw Error(code, text);  // the Python error indicator is clear: error_already_set fetched it
}

py::object CallbackFailures::take() {
  std::lock_guard<std::mutex> l(mu_);
  py::object out = first_ ? std::move(first_) : py::object(py::none());
  first_ = py::object();
  return out;
}

}  // namespace wt::python
