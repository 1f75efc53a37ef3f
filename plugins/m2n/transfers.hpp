// One round's point-to-point messages between mesh ranks (trainer ranks 0..M-1, then the worker
// ranks), whatever carries them: Gloo pairs for host memory (PairTransfers), NCCL sends and
// receives for CUDA memory (NcclTransfers). Messages are posted, then waited for in posting
// order, all within one deadline counted from the first post since the last wait_all. Between two
// ranks, the n-th message one posts to the other meets the n-th the other posts from it (`slot`
// names it for transports that match by name). abort() from any thread ends the wait in progress
// and every later one (WT_ERR_ABORTED); a failed or aborted round leaves the transfers broken
// for good: the mesh no longer lines up and must be made again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace wt::m2n {

class Transfers {
 public:
  virtual ~Transfers() = default;

  // `peer` is a mesh rank; `what` names the message in errors ("piece 2 of 'w' from trainer
  // rank 1"). The memory (the transport's: host or CUDA) and the text of `what` must stay valid
  // until the message was waited for, or discard() ran (a round's table owns both).
  virtual void post_send(int peer, uint64_t slot, const void* data, std::size_t bytes,
                         std::string_view what) = 0;
  virtual void post_recv(int peer, uint64_t slot, void* data, std::size_t bytes,
                         std::string_view what) = 0;
  // Waits for every message posted since the last wait_all, in order; throws sdk::Error naming
  // the first that failed (WT_ERR_TIMEOUT: its peer did not take part within the deadline or went
  // away; WT_ERR_ABORTED). Every posted message is forgotten either way.
  virtual void wait_all() = 0;
  // Waits, in posting order, for the messages posted since the last wait_all up to the n-th
  // (counted from 0: posted() - 1 is the last so far), so that their memory may be reused; throws
  // as wait_all (and then forgets every message).
  virtual void wait_through(std::size_t n) = 0;
  virtual std::size_t posted() const = 0;

  virtual void abort() = 0;
  virtual bool broken() const = 0;
  // On the posting thread, after a failure: forgets every posted message before the memory they
  // point at goes, tells the peers at once that this round is over here (closes the pairs, aborts
  // the communicator) and leaves the transfers broken. A failed wait does it itself.
  virtual void discard() = 0;
  // Rounds also end at once when `peer` gives one up (its pairs close), even while this rank
  // waits on no pair of it. Called before the first round. Gloo pairs only: NCCL has no such
  // signal (a failed rank there ends the others' waits by their deadline). A peer whose pairs
  // close for another reason (its engine went) reads the same: m2n's trainer ranks watch each
  // other, and so must end their engines together, after the last round (a barrier).
  virtual void end_with(int /*peer*/) {}
  // Why this round is over because a peer passed to end_with gave it up ("rank 2 closed its pair
  // with this rank: ..."), or empty. Rank 0 asks it while it waits on the control plane, where no
  // pair is watched.
  virtual std::string given_up() const { return {}; }
};

}  // namespace wt::m2n
