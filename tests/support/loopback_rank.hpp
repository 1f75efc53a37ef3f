// The options of one rank of a test group meeting at 127.0.0.1:port: rank 0 holds the session
// secret (as a trainer's rank 0 does), every other rank only its own key (as a worker does).
#pragma once

#include "communicator.hpp"
#include "session_keys.hpp"
#include "session_secret.hpp"

#include <chrono>

namespace wt::test {

inline plugins::CommunicatorOptions loopback_rank(
    const plugins::SessionSecret& secret, int rank, int world, int port,
    std::chrono::milliseconds deadline,
    const plugins::MeshPairs& shape = plugins::MeshPairs::broadcast_tree()) {
  plugins::CommunicatorOptions o;
  o.master_address = "127.0.0.1";
  o.master_port = port;
  o.rank = rank;
  o.world_size = world;
  o.rendezvous_timeout = deadline;
  o.transfer_timeout = deadline;
  o.pairs = shape;
  if (rank == 0)
    o.session_secret = secret.hex();
  else
    o.rank_key = plugins::SessionKeys::rank_key(secret, rank).hex();
  return o;
}

}  // namespace wt::test
