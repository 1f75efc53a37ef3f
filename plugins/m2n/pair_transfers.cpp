#include "pair_transfers.hpp"

#include "../common/gloo_mesh.hpp"
#include "../common/sigpipe_guard.hpp"

#include <wt/sdk/errors.hpp>

namespace wt::m2n {

using sdk::fail;

PairTransfers::PairTransfers(std::shared_ptr<gloo::rendezvous::Context> mesh,
                             std::chrono::milliseconds transfer_timeout)
    : mesh_(std::move(mesh)), timeout_(transfer_timeout) {}

PairTransfers::~PairTransfers() {
  clear();
}

void PairTransfers::clear() {
  // The buffers go before the memory they point at (their owners free it after this).
  ops_.clear();
  waited_ = 0;
}

void PairTransfers::discard() {
  broken_ = true;
  clear();
  // Closing every pair tells each peer at once that this round is over here, instead of letting
  // it wait out its deadline for messages that will never be taken.
  std::lock_guard<std::mutex> l(mu_);
  if (current_ == nullptr) mesh_.reset();
}

void PairTransfers::post_send(int peer, uint64_t slot, const void* data, std::size_t bytes,
                              std::string what) {
  post(true, peer, slot, const_cast<void*>(data), bytes, std::move(what));
}

void PairTransfers::post_recv(int peer, uint64_t slot, void* data, std::size_t bytes,
                              std::string what) {
  post(false, peer, slot, data, bytes, std::move(what));
}

void PairTransfers::post(bool send, int peer, uint64_t slot, void* data, std::size_t bytes,
                         std::string what) {
  if (broken_) fail(WT_ERR_STATE, "the m2n mesh broke in an earlier round; initialise again");
  plugins::SigpipeBlocked no_sigpipe;
  // One deadline for the round's messages, not one each: a peer trickling bytes cannot stretch it.
  if (ops_.empty()) until_ = std::chrono::steady_clock::now() + timeout_;
  try {
    plugins::gloo_call(what, [&] {
      Op op;
      op.buffer = mesh_->createUnboundBuffer(data, bytes);
      op.send = send;
      if (send)
        op.buffer->send(peer, slot);
      else
        op.buffer->recv(peer, slot);
      op.what = std::move(what);
      ops_.push_back(std::move(op));
    });
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
      bool done = false;
      try {
        plugins::gloo_call(op.what, [&] {
          const auto left = plugins::time_left(until);
          done = op.send ? op.buffer->waitSend(left) : op.buffer->waitRecv(left);
        });
      } catch (...) {
        std::lock_guard<std::mutex> l(mu_);
        current_ = nullptr;
        throw;
      }
      std::lock_guard<std::mutex> l(mu_);
      current_ = nullptr;
      // An interrupted wait returns false (or, for some waits, as if done): the flag tells.
      if (aborted_ || !done) fail(WT_ERR_ABORTED, "{}: aborted", op.what);
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
