// The trainer group of ranks a cluster launcher started, possibly on several hosts: Gloo over
// TCP, meeting at trainer rank 0's rendezvous store (group_address:group_port). Only holders of
// the group's secret take part: the store authenticates every request, and every pair answers a
// challenge under the secret before anything moves on it (the same mesh the host-memory backends
// form, plugins/common/gloo_mesh.hpp). The store closes once the group has formed.
#pragma once

#include "cluster_place.hpp"

#include <wt/trainer_group.hpp>

#include <chrono>
#include <memory>

namespace wt::cli {

// Blocks until every rank joined, within `join_timeout`; each collective then has
// `collective_timeout`. Throws wt::Error naming the rendezvous: WT_ERR_TIMEOUT when a rank did
// not come, WT_ERR_REMOTE when a peer did not prove the secret, WT_ERR_SYSTEM when rank 0 cannot
// listen at the group address.
std::unique_ptr<TrainerGroup> join_cluster_trainer_group(
    const ClusterPlace& place, std::chrono::milliseconds join_timeout,
    std::chrono::milliseconds collective_timeout);

// The ranks `wt launch` started on this host (trainer.ranks > 1): the same authenticated group, on
// loopback. The coordinator mints the group's secret and picks rank 0's store port, and writes
// both into the run's rendezvous directory (its own, 0700) as a file of its own (0600), which
// each rank reads: a local stranger can neither read the secret nor end a rank through its
// pairs' ports. Throws wt::Error naming the file when it cannot be written or read back as wt
// wrote it (WT_ERR_SYSTEM, WT_ERR_INVALID_ARGUMENT).
void write_host_trainer_group(const std::string& rendezvous_dir);
std::unique_ptr<TrainerGroup> join_host_trainer_group(int rank, int size,
                                                      const std::string& rendezvous_dir,
                                                      std::chrono::milliseconds join_timeout,
                                                      std::chrono::milliseconds collective_timeout);

}  // namespace wt::cli
