// The parts of the extension module wt._wt, one per file.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <functional>

namespace wt::python {

namespace py = pybind11;

void bind_clients(py::module_& m);         // HttpClient
void bind_trainer(py::module_& m);         // trainer_init, TrainerEngine, SparsePatch, make_delta
void bind_worker(py::module_& m);          // WorkerEngine
void bind_receiver(py::module_& m);        // Receiver
void bind_tools(py::module_& m);           // plugins
void bind_engine_session(py::module_& m);  // EngineSession

// Runs `work` on a thread of its own, the GIL released, while this thread keeps Python's signal
// handlers running (every 50 ms): on Ctrl-C, `abort` is called and the call ends with
// wt.Aborted (its __cause__ the KeyboardInterrupt) once `work` returned. Otherwise rethrows
// what `work` threw. GIL held on entry and exit.
void run_interruptible(const std::function<void()>& work, const std::function<void()>& abort,
                       const char* what);

}  // namespace wt::python
