// The trainer ranks that share one inference engine (e.g. FSDP ranks colocated with it). A
// backend uses it to merge per-rank handles at the sender and to keep ranks in step.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/wt_plugin.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace wt {

class TrainerGroup {
 public:
  virtual ~TrainerGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's bytes, indexed by rank, on every rank. Throws wt::Error (WT_ERR_TIMEOUT, ...).
  virtual std::vector<std::string> all_gather(std::string_view mine) = 0;
  virtual void barrier() = 0;

  // The C view handed to plugins; valid as long as this object.
  const wt_trainer_group* c_group();

 private:
  wt_trainer_group c_{};
};

}  // namespace wt
