#include "py_json.hpp"

#include <wt/error.hpp>
#include <wt/json_parse.hpp>

#include <fmt/format.h>

namespace wt::python {

std::string json_text(py::handle obj, const char* what) {
  if (py::isinstance<py::str>(obj)) return obj.cast<std::string>();
  if (!py::isinstance<py::dict>(obj) && !py::isinstance<py::list>(obj))
    throw Error(
        WT_ERR_INVALID_ARGUMENT,
        fmt::format("{} must be a dict (or JSON text), not {}", what,
                    py::str(py::type::handle_of(obj).attr("__qualname__")).cast<std::string>()));
  return py::module_::import("json").attr("dumps")(obj).cast<std::string>();
}

nlohmann::json json_object(py::handle obj, const char* what) {
  nlohmann::json out;
  try {
    out = parse_json(json_text(obj, what));
  } catch (const JsonError& e) {
    throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("{} is not usable JSON: {}", what, e.what()));
  }
  if (!out.is_object())
    throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("{} must be a JSON object", what));
  return out;
}

py::object from_json_text(std::string_view text) {
  return py::module_::import("json").attr("loads")(py::str(text.data(), text.size()));
}

}  // namespace wt::python
