#include "pair_transfers.hpp"

#include "../common/gloo_mesh.hpp"
#include "../common/proving_device.hpp"
#include "../common/sigpipe_guard.hpp"

#include <wt/sdk/errors.hpp>

#include <algorithm>
#include <optional>

namespace wt::m2n {

using plugins::kClosedPeerGrace;
using sdk::fail;

PairTransfers::PairTransfers(std::shared_ptr<gloo::rendezvous::Context> mesh,
                             std::chrono::milliseconds transfer_timeout,
                             std::chrono::milliseconds stall_timeout)
    : mesh_(std::move(mesh)), timeout_(transfer_timeout), stall_(stall_timeout) {}

PairTransfers::~PairTransfers() {
  clear();
}

void PairTransfers::clear() {
  // The buffers go before the memory they point at (their owners free it after this).
  ops_.clear();
  waited_ = 0;
  round_peers_.clear();
  round_pairs_ = std::make_shared<Progresses>();
}

void PairTransfers::discard() {
  broken_ = true;
  clear();
  // Closing every pair tells each peer at once that this round is over here, instead of letting
  // it wait out its deadline for messages that will never be taken.
  std::lock_guard<std::mutex> l(mu_);
  if (current_ == nullptr) mesh_.reset();
}

void PairTransfers::end_with(int peer) {
  if (auto p = plugins::pair_progress(*mesh_, peer)) fates_.emplace_back(peer, std::move(p));
}

std::string PairTransfers::given_up() const {
  for (const auto& f : fates_)
    if (f.second->closed())
      return fmt::format(
          "rank {} closed its pair with this rank: it gave up the round (its own error says why)",
          f.first);
  return {};
}

void PairTransfers::post_send(int peer, uint64_t slot, const void* data, std::size_t bytes,
                              std::string_view what) {
  post(true, peer, slot, const_cast<void*>(data), bytes, what);
}

void PairTransfers::post_recv(int peer, uint64_t slot, void* data, std::size_t bytes,
                              std::string_view what) {
  post(false, peer, slot, data, bytes, what);
}

void PairTransfers::post(bool send, int peer, uint64_t slot, void* data, std::size_t bytes,
                         std::string_view what) {
  if (broken_) fail(WT_ERR_STATE, "the m2n mesh broke in an earlier round; initialise again");
  plugins::SigpipeBlocked no_sigpipe;
  // One deadline for the round's messages, not one each: a peer trickling bytes cannot stretch it.
  if (ops_.empty()) until_ = std::chrono::steady_clock::now() + timeout_;
  try {
    plugins::gloo_call(what, [&] {
      Op op;
      op.buffer = mesh_->createUnboundBuffer(data, bytes);
      op.send = send;
      op.peer = peer;
      if (send)
        op.buffer->send(peer, slot);
      else
        op.buffer->recv(peer, slot);
      op.what = what;
      ops_.push_back(std::move(op));
    });
    if (round_peers_.insert(peer).second)
      if (auto p = plugins::pair_progress(*mesh_, peer)) {
        auto pairs = std::make_shared<Progresses>(*round_pairs_);
        pairs->push_back(std::move(p));
        round_pairs_ = std::move(pairs);
      }
  } catch (...) {
    discard();
    throw;
  }
}

void PairTransfers::wait_all() {
  if (!ops_.empty()) wait_through(ops_.size() - 1);
  clear();
}

void PairTransfers::wait_through(std::size_t n) {
  plugins::SigpipeBlocked no_sigpipe;
  const auto until = until_;
  try {
    for (; waited_ <= n && waited_ < ops_.size(); ++waited_) {
      Op& op = ops_[waited_];
      {
        std::lock_guard<std::mutex> l(mu_);
        if (aborted_) fail(WT_ERR_ABORTED, "{}: aborted", op.what);
        current_ = op.buffer.get();
      }
      // The watch reads the pair's progress through its own reference, and interrupts only
      // through current_, under mu_.
      const auto peer = plugins::pair_progress(*mesh_, op.peer);
      stall_.arm(
          [peer, pairs = round_pairs_] {
            if (!peer) return std::chrono::steady_clock::now();
            auto last = peer->last();
            for (const auto& p : *pairs) last = std::max(last, p->last());
            return last;
          },
          [this] {
            std::lock_guard<std::mutex> l(mu_);
            if (current_ == nullptr) return;
            current_->abortWaitRecv();
            current_->abortWaitSend();
          },
          [this, peer,
           closed_at = std::optional<std::chrono::steady_clock::time_point>()]() mutable {
            for (const auto& f : fates_)  // fixed once rounds run, and outlives the watch
              if (f.second->closed()) return true;
            // The peer this wait is for closed its pair (it died, or gave the round up):
            // what it had sent before is read before the close is seen, so a wait still open
            // a moment later can never be served. The moment lets a wait its last bytes just
            // completed return on its own.
            if (peer == nullptr || !peer->closed()) return false;
            const auto now = std::chrono::steady_clock::now();
            if (!closed_at) closed_at = now;
            return now - *closed_at >= kClosedPeerGrace;
          });
      bool done = false;
      try {
        plugins::gloo_call(op.what, [&] {
          const auto left = plugins::time_left(until);
          done = op.send ? op.buffer->waitSend(left) : op.buffer->waitRecv(left);
        });
      } catch (...) {
        stall_.disarm();
        std::lock_guard<std::mutex> l(mu_);
        current_ = nullptr;
        throw;
      }
      const bool stalled = stall_.disarm();
      std::lock_guard<std::mutex> l(mu_);
      current_ = nullptr;
      // An interrupted wait returns false (or, for some waits, as if done): the flags tell.
      if (aborted_) fail(WT_ERR_ABORTED, "{}: aborted", op.what);
      if (stalled && !done)
        if (const std::string why = given_up(); !why.empty())
          fail(WT_ERR_REMOTE, "{}: {}", op.what, why);
      if (stalled && !done && peer != nullptr && peer->closed())
        fail(WT_ERR_REMOTE,
             "{}: rank {} closed its pair with this rank before its part arrived: it stopped, "
             "or gave the round up",
             op.what, op.peer);
      if (stalled && !done)
        fail(WT_ERR_TIMEOUT,
             "{}: no byte moved on the pair with rank {} (nor on any other of this round) for "
             "{} ms (stall_timeout_s): the peer "
             "stopped or the link is cut",
             op.what, op.peer, stall_.deadline().count());
      if (!done) fail(WT_ERR_ABORTED, "{}: aborted", op.what);
    }
  } catch (...) {
    discard();
    throw;
  }
}

void PairTransfers::abort() {
  plugins::interrupt_waits(mu_, current_, [this] {
    aborted_ = true;
    broken_ = true;
  });
}

}  // namespace wt::m2n
