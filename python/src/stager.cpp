#include "stager.hpp"

#include <wt/dtype.hpp>
#include <wt/error.hpp>
#include <wt/sdk/tensor_layout.hpp>

#include <fmt/format.h>

namespace wt::python {

Held checked_destination(py::handle d, const ParamMeta& param) {
  Held h = to_dlpack(d, "destination('{}')", param.name);
  const DLTensor& t = h.tensor();
  const bool same_shape = t.ndim == static_cast<int32_t>(param.shape.size()) &&
                          std::equal(param.shape.begin(), param.shape.end(), t.shape);
  if (!(t.dtype == param.dtype) || !same_shape || !is_compact(t) || t.byte_offset != 0) {
    std::string shape;
    for (std::size_t i = 0; i < param.shape.size(); ++i)
      shape += (i ? "x" : "") + std::to_string(param.shape[i]);
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("destination('{}') returned a {}{} tensor, but the update sends {} {}",
                            param.name, describe(t), is_compact(t) ? "" : " non-contiguous",
                            torch_name(param.dtype), shape.empty() ? "scalar" : shape));
  }
  return h;
}

}  // namespace wt::python
