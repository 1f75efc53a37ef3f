// wt::Error as wt.errors classes, and the Python exceptions raised inside callbacks wt calls (a
// source's iteration, a client's methods, a worker's load) carried back to the caller.
#pragma once

#include <wt/error.hpp>

#include <pybind11/pybind11.h>

#include <mutex>
#include <string>

namespace wt::python {

namespace py = pybind11;

// The wt.errors instance for `e` (GIL held); `cause` becomes its __cause__ when given.
py::object as_python(const Error& e, py::object cause = py::none());

// Sets `e` as the pending Python exception and throws py::error_already_set.
[[noreturn]] void raise(const Error& e, py::object cause = py::none());

// Makes the extension raise wt.errors classes for every wt::Error that reaches Python.
void register_translator();

// The first Python exception raised by a callback during one engine call. Callbacks run on wt's
// threads: rethrow() turns the exception into a wt::Error the plugin sees, and the caller, once
// the engine call returns, raises the wt error with that exception as its cause.
class CallbackFailures {
 public:
  // In a catch of py::error_already_set, GIL held: remembers it, then throws a wt::Error with
  // `code` and "<context>: <ExceptionType>: <message>".
  [[noreturn]] void rethrow(py::error_already_set& e, wt_status code, const std::string& context);
  // The remembered exception (or None), forgotten (GIL held).
  py::object take();

 private:
  std::mutex mu_;
  py::object first_;
};

}  // namespace wt::python
