#include "py_stream.hpp"

#include "dlpack_bridge.hpp"

#include <wt/error.hpp>

#include <fmt/format.h>

#include <cstdint>

namespace wt::python {

namespace {

// torch.cuda when torch is imported and has initialised CUDA; None otherwise (a CPU-only torch,
// or one that never touched a GPU: nothing can be queued on a stream then).
py::object initialised_torch_cuda() {
  PyObject* torch = PyImport_GetModule(py::str("torch").ptr());
  if (torch == nullptr) {
    PyErr_Clear();
    return py::none();
  }
  py::object cuda = py::reinterpret_steal<py::object>(torch).attr("cuda");
  if (!cuda.attr("is_initialized")().cast<bool>()) return py::none();
  return cuda;
}

}  // namespace

void* stream_of(py::handle stream, const char* field) {
  if (stream.is_none()) {
    py::object cuda = initialised_torch_cuda();
    if (cuda.is_none()) return nullptr;
    return reinterpret_cast<void*>(
        cuda.attr("current_stream")().attr("cuda_stream").cast<uintptr_t>());
  }
  if (py::isinstance<py::bool_>(stream))
    throw invalid(fmt::format("{}: a bool is not a CUDA stream", field));
  if (py::isinstance<py::int_>(stream)) {
    const auto value = stream.cast<long long>();
    if (value < 0) throw invalid(fmt::format("{}: {} is not a cudaStream_t", field, value));
    return reinterpret_cast<void*>(static_cast<uintptr_t>(value));
  }
  if (py::hasattr(stream, "cuda_stream"))
    return reinterpret_cast<void*>(stream.attr("cuda_stream").cast<uintptr_t>());
  throw invalid(fmt::format(
      "{} is a {}: pass a torch.cuda.Stream, a cudaStream_t as an int (0: the legacy default "
      "stream) or None (the current stream)",
      field, type_name(stream)));
}

void order_after_producer(py::handle tensor) {
  if (!is_torch_tensor(tensor) || !tensor.attr("is_cuda").cast<bool>()) return;
  py::module_::import("torch")
      .attr("cuda")
      .attr("current_stream")(tensor.attr("device"))
      .attr("synchronize")();
}

}  // namespace wt::python
