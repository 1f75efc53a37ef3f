// Which CUDA stream a Python call orders its device work against. Backends read a round's CUDA
// tensors after the work queued on that stream and write a worker's on it; without one they
// synchronise whole devices. Python names it as torch does: a torch.cuda.Stream (anything with
// `cuda_stream`), a raw cudaStream_t as an int (0: the legacy default stream), or None: the
// caller's current stream where torch has CUDA initialised, else none (host memory needs none).
#pragma once

#include <pybind11/pybind11.h>

namespace wt::python {

namespace py = pybind11;

// GIL held. Throws wt::Error (WT_ERR_INVALID_ARGUMENT) naming `field` for anything else.
void* stream_of(py::handle stream, const char* field);

// A CUDA tensor a lazy source just made may still be being written by the stream that made it:
// wait for that stream (the caller's current one on the tensor's device) before the backend
// reads it. Nothing for any other tensor. GIL held.
void order_after_producer(py::handle tensor);

}  // namespace wt::python
