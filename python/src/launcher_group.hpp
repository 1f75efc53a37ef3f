// wt.LauncherGroup: the trainer group of the ranks a cluster launcher started (torchrun, SLURM,
// Open MPI, and the Ray frameworks that set torchrun's variables), formed by wt itself exactly as
// `wt launch --rank-from-env` forms it: for a training loop that has no torch.distributed group.
// Trainer rank 0 hosts the rendezvous at the launcher's MASTER_ADDR (or first SLURM host, or
// `address`) on `port`, never the launcher's own MASTER_PORT; every pair proves the group's
// secret (WT_TRAINER_SECRET, or a file of the user's) before anything moves on it.
#pragma once

#include "bindings.hpp"

#include <wt/trainer_group.hpp>

#include <memory>
#include <string>

namespace wt::python {

class LauncherGroup {
 public:
  // Blocks (the GIL released) until every rank joined, within join_timeout_s. Throws wt::Error
  // naming the variable or argument: no launcher found, a port that is the launcher's, no secret
  // for several ranks, a rank that did not come (WT_ERR_TIMEOUT).
  LauncherGroup(int port, const std::string& address, const std::string& secret_file,
                double join_timeout_s, double collective_timeout_s);

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The group the backend uses; null for a world of one.
  TrainerGroup* group() const { return group_.get(); }
  std::string describe() const;

 private:
  int rank_ = 0, size_ = 1;
  std::string where_;
  std::unique_ptr<TrainerGroup> group_;
};

void bind_launcher_group(py::module_& m);

}  // namespace wt::python
