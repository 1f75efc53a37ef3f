#include "bindings.hpp"
#include "py_errors.hpp"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace wt::python {

void run_interruptible(const std::function<void()>& work, const std::function<void()>& abort,
                       const char* what) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr failure;
  py::object interrupt = py::none();
  {
    py::gil_scoped_release released;
    std::thread worker([&] {
      // A Python thread state for the thread's whole life: the callbacks it runs (a source's
      // next tensor) then take the GIL without creating and deleting one each time.
      const PyGILState_STATE state = PyGILState_Ensure();
      PyThreadState* saved = PyEval_SaveThread();
      try {
        work();
      } catch (...) {
        failure = std::current_exception();
      }
      PyEval_RestoreThread(saved);
      PyGILState_Release(state);
      std::lock_guard<std::mutex> l(mu);
      done = true;
      cv.notify_all();
    });
    bool aborted = false;
    for (;;) {
      {
        std::unique_lock<std::mutex> l(mu);
        if (cv.wait_for(l, std::chrono::milliseconds(50), [&] { return done; })) break;
      }
      if (aborted) continue;
      {
        py::gil_scoped_acquire g;
        // Python runs its signal handlers only on the main thread; elsewhere this is a no-op.
        if (PyErr_CheckSignals() != 0) {
          py::error_already_set e;
          interrupt = e.value();
          aborted = true;
        }
      }
      if (aborted) abort();
    }
    worker.join();
  }
  if (!interrupt.is_none()) {
    const bool keyboard =
        py::isinstance(interrupt, py::module_::import("builtins").attr("KeyboardInterrupt"));
    if (!keyboard) {
      // Another handler raised: that exception is what the caller gets.
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(interrupt.ptr())), interrupt.ptr());
      throw py::error_already_set();
    }
    raise(Error(WT_ERR_ABORTED, std::string(what) + " interrupted (KeyboardInterrupt)"), interrupt);
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace wt::python
