#include "broadcast_group.hpp"

#include "gloo_mesh.hpp"
#include "sigpipe_guard.hpp"

#include <wt/sdk/errors.hpp>

#include <gloo/broadcast.h>

#include <cstring>
#include <optional>
#include <thread>

namespace wt::plugins {
namespace {

using sdk::fail;

uint32_t get_u32(const unsigned char* p) {
  return static_cast<uint32_t>(get_le(p, 4));
}
uint64_t get_u64(const unsigned char* p) {
  return get_le(p, 8);
}
constexpr unsigned char kFrameMagic[4] = {'W', 'T', 'B', '1'};

}  // namespace

BroadcastGroup::BroadcastGroup(const Options& o, std::unique_ptr<TcpStoreServer> store)
    : options_(o),
      context_(form_gloo_mesh(o, std::move(store))),
      progress_(mesh_progress(*context_)),
      stall_(o.stall_timeout) {}

BroadcastGroup::~BroadcastGroup() = default;

void BroadcastGroup::run(void* data, std::size_t bytes, int root, const std::string& what) {
  // Inside gloo_call, which names `what` in whatever it throws.
  auto aborted = [] { fail(WT_ERR_ABORTED, "aborted"); };
  gloo_call(what, [&] {
    gloo::BroadcastOptions b(context_);
    auto buffer = context_->createUnboundBuffer(data, bytes);
    {
      std::lock_guard<std::mutex> l(abort_mu_);
      if (aborted_) aborted();
      current_ = buffer.get();
    }
    b.setOutput<uint8_t>(std::move(buffer));
    b.setRoot(root);
    b.setTimeout(options_.transfer_timeout);
    // Gloo picks the tree: any of the pairs may be the one this rank waits on.
    // A peer that closed its pair (killed, or it gave the round up) ends the wait at once: a
    // wait posted after the close is never told by Gloo. The moment lets bytes read before the
    // close complete a wait on their own.
    stall_.arm([progress = progress_] { return latest(progress); },
               [this] {
                 std::lock_guard<std::mutex> l(abort_mu_);
                 if (current_ == nullptr) return;
                 current_->abortWaitRecv();
                 current_->abortWaitSend();
               },
               [progress = progress_,
                closed_at = std::optional<StallWatch::Clock::time_point>()]() mutable {
                 bool closed = false;
                 for (const auto& p : progress) closed = closed || p->closed();
                 if (!closed) return false;
                 const auto now = StallWatch::Clock::now();
                 if (!closed_at) closed_at = now;
                 return now - *closed_at >= kClosedPeerGrace;
               });
    try {
      gloo::broadcast(b);
    } catch (...) {
      stall_.disarm();
      std::lock_guard<std::mutex> l(abort_mu_);
      current_ = nullptr;
      throw;
    }
    const bool stalled = stall_.disarm();
    std::lock_guard<std::mutex> l(abort_mu_);
    current_ = nullptr;
    // An interrupted wait returns as if done: only the flags tell. The buffer goes with `b`, so
    // bytes arriving later are not written into `data`.
    if (aborted_) aborted();
    if (const int peer = stalled ? closed_peer() : -1; peer >= 0)
      fail(WT_ERR_REMOTE,
           "rank {} closed its connection with this rank before the broadcast ended: it stopped, "
           "or gave the round up",
           peer);
    if (stalled)
      fail(WT_ERR_TIMEOUT,
           "no byte moved on any of this rank's pairs for {} ms (stall_timeout_s): a peer "
           "stopped or the link is cut",
           stall_.deadline().count());
  });
}

int BroadcastGroup::closed_peer() const {
  for (int peer = 0; peer < context_->size; ++peer)
    if (auto p = pair_progress(*context_, peer); p && p->closed()) return peer;
  return -1;
}

void BroadcastGroup::broadcast(void* data, std::size_t bytes, int root, const std::string& what) {
  if (broken_) {
    std::lock_guard<std::mutex> l(abort_mu_);
    if (aborted_) fail(WT_ERR_ABORTED, "{}: aborted", what);
    fail(WT_ERR_STATE, "the group broke in an earlier transfer; initialise again");
  }
  if (!options_.pairs.allows_root(root))
    fail(WT_ERR_INVALID_ARGUMENT,
         "{}: a broadcast from rank {} on {}, which connects rank 0's tree", what, root,
         options_.pairs.describe());
  SigpipeBlocked no_sigpipe;
  try {
    // The frame first: a receiver expecting another length refuses before any byte lands.
    unsigned char frame[kFrameBytes] = {};
    const uint32_t number = sequence_++;
    if (options_.rank == root) {
      std::memcpy(frame, kFrameMagic, 4);
      put_le(frame + 4, number, 4);
      put_le(frame + 8, bytes, 8);
    }
    run(frame, sizeof frame, root, what);
    if (options_.rank != root) {
      const uint64_t sent = get_u64(frame + 8);
      if (std::memcmp(frame, kFrameMagic, 4) != 0)
        fail(WT_ERR_REMOTE, "{}: the sender's frame is not a wt broadcast frame", what);
      if (get_u32(frame + 4) != number)
        fail(WT_ERR_REMOTE,
             "{}: the sender is at broadcast {} of the session, this rank at {} (out of step)",
             what, get_u32(frame + 4), number);
      if (sent != bytes)
        fail(WT_ERR_REMOTE,
             "{}: the sender broadcast {} bytes, this rank expected {}; nothing of it was taken",
             what, sent, bytes);
    }
    if (bytes > 0) run(data, bytes, root, what);
  } catch (...) {
    broken_ = true;  // the peers' collectives no longer line up
    throw;
  }
}

void BroadcastGroup::abort() {
  interrupt_waits(abort_mu_, current_, [this] {
    aborted_ = true;
    broken_ = true;
  });
}

}  // namespace wt::plugins
