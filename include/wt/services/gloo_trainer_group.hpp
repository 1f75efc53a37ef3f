// The default trainer group: Gloo over TCP, rendezvous through files in a directory all ranks can
// see (the ranks of a colocated trainer share a host). Every collective has `timeout`.
// In libwt_gloo (CMake target wt::gloo), not in the minimal core.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/trainer_group.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace wt {

std::unique_ptr<TrainerGroup> make_gloo_trainer_group(int rank, int size,
                                                      const std::string& rendezvous_dir,
                                                      std::chrono::milliseconds timeout);

}  // namespace wt
