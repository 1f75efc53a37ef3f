// A trainer group written in Python: any object with rank(), size(), all_gather(bytes) -> list of
// bytes (every rank's, by rank) and barrier(). wt.trainer_init wraps a torch.distributed process
// group in one (wt._TorchGroup), so that the trainer ranks a launcher started (torchrun, SLURM
// through torch) share what the backend gathers (m2n's holdings, rank 0's secrets) over the
// group the training loop already has.
#pragma once

#include "py_errors.hpp"

#include <wt/trainer_group.hpp>

namespace wt::python {

class PyTrainerGroup final : public TrainerGroup {
 public:
  PyTrainerGroup(py::object group, CallbackFailures& failures);  // GIL held; reads rank and size
  ~PyTrainerGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // With the GIL, from whichever thread the backend calls them; a Python exception becomes a
  // wt::Error (WT_ERR_REMOTE) naming the call, and the caller's exception has it as __cause__.
  std::vector<std::string> all_gather(std::string_view mine) override;
  void barrier() override;

 private:
  py::object group_;
  CallbackFailures& failures_;
  int rank_ = 0, size_ = 1;
};

}  // namespace wt::python
