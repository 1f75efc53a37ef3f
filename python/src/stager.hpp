// What a Python engine's destinations need: the check that a tensor can take a parameter as the
// update sends it, and the staging of a round beside the engine's own tensors (wt.WorkerEngine
// with staged=True, wt.EngineSession), copied over only when the round finishes.
#pragma once

#include "dlpack_bridge.hpp"

#include <wt/dtype.hpp>
#include <wt/engine.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace wt::python {

// `d` exported, checked to be compact row-major memory of `param`'s dtype and shape (GIL held);
// else WT_ERR_INVALID_ARGUMENT: "destination('w') returned a float32 2x8 tensor, but the update
// sends float32 4x4".
Held checked_destination(py::handle d, const ParamMeta& param);

// The staging tensors of a staged worker: one per destination, made like it (same dtype, shape
// and device, contiguous) at its first round and kept for the next ones; what a round wrote
// into them is copied into the destinations at finish. Touched only with the GIL held.
class Stager {
 public:
  ~Stager() { clear(); }

  // Where the backend writes `name` this round instead of `destination` (checked already).
  DLTensor stage(const std::string& name, py::object destination, const DLTensor& d) {
    auto it = slots_.find(name);
    if (it == slots_.end() || !same_form(it->second.held.tensor(), d)) {
      Slot slot;
      slot.staging =
          is_torch_tensor(destination)
              ? py::module_::import("torch").attr("empty_like")(
                    destination, py::arg("memory_format") =
                                     py::module_::import("torch").attr("contiguous_format"))
              : py::module_::import("numpy").attr("empty_like")(destination,
                                                                py::arg("order") = "C");
      slot.held = to_dlpack(slot.staging, "the staging tensor of '{}'", name);
      it = slots_.insert_or_assign(name, std::move(slot)).first;
    }
    if (it->second.destination.is_none()) written_.push_back(name);
    it->second.destination = std::move(destination);
    DLTensor out = it->second.held.tensor();
    out.strides = nullptr;  // made contiguous
    return out;
  }

  // The round finished: every staged tensor into its destination (a device copy for CUDA).
  void commit() {
    for (const std::string& name : written_) {
      Slot& slot = slots_.at(name);
      py::object dst = std::exchange(slot.destination, py::none());
      if (is_torch_tensor(dst))
        dst.attr("detach")().attr("copy_")(slot.staging);
      else
        py::module_::import("numpy").attr("copyto")(dst, slot.staging);
    }
    written_.clear();
  }

  // The round ended without finishing: what it staged is dropped, the destinations untouched.
  void drop() {
    for (const std::string& name : written_) slots_.at(name).destination = py::none();
    written_.clear();
  }

  void clear() {
    written_.clear();
    slots_.clear();
  }

 private:
  static bool same_form(const DLTensor& a, const DLTensor& b) {
    return a.dtype == b.dtype && a.ndim == b.ndim && a.device.device_type == b.device.device_type &&
           a.device.device_id == b.device.device_id &&
           std::equal(a.shape, a.shape + a.ndim, b.shape);
  }
  struct Slot {
    py::object staging, destination = py::none();
    Held held;
  };
  std::map<std::string, Slot> slots_;
  std::vector<std::string> written_;  // staged this round, in order
};

}  // namespace wt::python
