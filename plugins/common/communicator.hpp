// What the nccl backends need of a broadcast domain: one-to-all broadcasts, each with a deadline,
// and an abort from any thread. Gloo moves host memory (broadcast_group), NCCL moves CUDA memory
// (nccl_communicator); unit tests put a spy in their place to count and inspect collectives.
// Shared by the nccl and sparse_nccl backends (compiled into each, plugins/common).
#pragma once

#include "mesh_pairs.hpp"

#include <dlpack/dlpack.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace wt::plugins {

struct CommunicatorOptions {
  std::string master_address;  // the rendezvous (Gloo: the store rank 0 hosts)
  int master_port = 0;
  int rank = 0;
  int world_size = 0;
  std::chrono::milliseconds rendezvous_timeout{60'000};
  std::chrono::milliseconds transfer_timeout{300'000};
  // Gloo only: a wait on which no byte moved for this long fails (WT_ERR_TIMEOUT), however much
  // of transfer_timeout is left: a stopped peer or a cut link is told from a slow round.
  std::chrono::milliseconds stall_timeout{60'000};
  // Gloo only: what this rank proves itself with before a weight byte moves (session_keys.hpp):
  // the session secret (hex) on a trainer rank, or a worker's own rank key (hex, from its init
  // info's `rank_keys`); and where the sender's store reports the strangers it dropped.
  std::string session_secret;
  std::string rank_key;
  std::function<void(const std::string&)> warn;
  // Gloo only: polled while the rendezvous waits for peers; true ends it at once
  // (WT_ERR_ABORTED), as when the init call the peers join inside has already failed.
  std::function<bool()> give_up;
  // Gloo only: the pairs the mesh connects (mesh_pairs.hpp); a broadcast from rank 0 needs no
  // other.
  MeshPairs pairs = MeshPairs::broadcast_tree();
};

// One broadcast's digest, as a domain that digests them records it (round_digests.hpp), and what
// the broadcast was (its `what`, which names the tensor or chunk).
struct BroadcastDigest {
  std::array<unsigned char, 16> digest{};
  std::string what;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  // Broadcasts `bytes` bytes at `data` from `root` to every rank, within the transfer deadline.
  // `dtype` is what the bytes hold (NCCL broadcasts typed elements, as vLLM's peers expect; Gloo
  // moves bytes). A peer that dies or stalls fails it (WT_ERR_TIMEOUT / WT_ERR_REMOTE) naming
  // `what`; the domain is then broken for good and must be made again.
  virtual void broadcast(void* data, std::size_t bytes, DLDataType dtype, int root,
                         const std::string& what) = 0;
  // The same broadcast, for a caller that reuses `data` only once `settled` ran: most domains call
  // it before returning; one that still reads the bytes afterwards (a digesting receiver hashes
  // what arrived while the next broadcast runs) calls it later, once, from another thread, and
  // always within bounded time. When the broadcast throws, `settled` is never called.
  virtual void broadcast_then(void* data, std::size_t bytes, DLDataType dtype, int root,
                              const std::string& what, std::function<void()> settled) {
    broadcast(data, bytes, dtype, root, what);
    settled();
  }
  // From any thread: the broadcast in progress fails with WT_ERR_ABORTED, as does every later one.
  virtual void abort() = 0;
  virtual bool broken() const = 0;
  // The CUDA stream its collectives run on (NCCL), or nullptr (host memory): copies queued there
  // before a broadcast are ordered before it.
  virtual void* stream() const { return nullptr; }
  // Whether destroying it ends its peers' waits at once. Gloo's does (its pairs close), so a
  // failed round drops the group first; NCCL's does not, so a failed round aborts it, tells the
  // inference side, and the group goes only when the engine does (retire_broken).
  virtual bool peers_see_it_close() const { return true; }
  // The digests of the broadcasts since the last call, in order, and forgets them (waiting for
  // digests still being computed). A domain that does not digest (NCCL, the unit tests' spies)
  // has none.
  virtual std::vector<BroadcastDigest> take_digests() { return {}; }
  virtual bool digests() const { return false; }
};

// After a round failed once a collective began: the group is done. One whose closing tells its
// peers is destroyed now; another is aborted and kept in `retired` (which the engine declares
// before its parked calls, so it is destroyed after them: the workers are told first).
inline void retire_broken(std::unique_ptr<Communicator>& group,
                          std::unique_ptr<Communicator>& retired) {
  if (!group) return;
  if (group->peers_see_it_close()) {
    group.reset();
    return;
  }
  group->abort();
  retired = std::move(group);
}

// Makes the domain for these options (blocking until every rank joined).
using CommunicatorFactory =
    std::function<std::unique_ptr<Communicator>(const CommunicatorOptions&)>;

}  // namespace wt::plugins
