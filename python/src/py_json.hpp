// JSON between Python objects and the text the C++ side takes (Python's own json module).
#pragma once

#include <pybind11/pybind11.h>
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace wt::python {

namespace py = pybind11;

// A dict or a list as JSON text, or str taken as JSON text already; anything else is refused
// (WT_ERR_INVALID_ARGUMENT) naming `what`.
std::string json_text(py::handle obj, const char* what);

// `obj` (as json_text takes it) as a JSON object, parsed within wt's bounds (wt::parse_json: a
// text nested 100,000 deep is refused, not recursed into); errors name `what`.
nlohmann::json json_object(py::handle obj, const char* what);

// JSON text as Python objects.
py::object from_json_text(std::string_view text);

}  // namespace wt::python
