// The default trainer group: Gloo over TCP. Every collective has `timeout`.
// In libwt_gloo (CMake target wt::gloo), not in the minimal core.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/trainer_group.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace gloo::rendezvous {
class Context;
}

namespace wt {

// Ranks on one host: rendezvous through files in a directory every rank can see (make it 0700:
// whoever can write there can join), pairs on loopback.
std::unique_ptr<TrainerGroup> make_gloo_trainer_group(int rank, int size,
                                                      const std::string& rendezvous_dir,
                                                      std::chrono::milliseconds timeout);

// Over a Gloo full mesh the caller formed (across hosts, say, through a rendezvous store of its
// own); the group's rank and size are the context's. Throws wt::Error (WT_ERR_INVALID_ARGUMENT)
// for a null context.
std::unique_ptr<TrainerGroup> make_gloo_trainer_group(
    std::shared_ptr<gloo::rendezvous::Context> connected, std::chrono::milliseconds timeout);

}  // namespace wt
