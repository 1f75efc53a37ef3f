#include "nccl_transfers.hpp"

#include <wt/sdk/errors.hpp>

namespace wt::m2n {

using sdk::fail;

NcclTransfers::NcclTransfers(std::unique_ptr<plugins::NcclCommunicator> comm,
                             std::chrono::milliseconds transfer_timeout)
    : comm_(std::move(comm)), timeout_(transfer_timeout) {}

void NcclTransfers::post_send(int peer, uint64_t, const void* data, std::size_t bytes,
                              std::string_view what) {
  post(true, peer, const_cast<void*>(data), bytes, what);
}

void NcclTransfers::post_recv(int peer, uint64_t, void* data, std::size_t bytes,
                              std::string_view what) {
  post(false, peer, data, bytes, what);
}

void NcclTransfers::post(bool send, int peer, void* data, std::size_t bytes,
                         std::string_view what) {
  if (broken())
    fail(WT_ERR_STATE, "the m2n communicator broke in an earlier round; initialise again");
  ops_.push_back({send, peer, data, bytes});
  whats_.push_back(what);
}

void NcclTransfers::wait_through(std::size_t n) {
  if (waited_ > n || waited_ >= ops_.size()) return;
  const std::size_t end = std::min(n + 1, ops_.size());
  const std::vector<plugins::NcclCommunicator::P2p> group(ops_.begin() + waited_,
                                                          ops_.begin() + end);
  // The exchange has the transfer deadline, each group its own: NCCL gives no way to wait for one
  // message of a group, so the deadline is per group rather than per round.
  const std::string what = end - waited_ == 1 ? std::string(whats_[waited_])
                                              : fmt::format("{} and {} more message(s)",
                                                            whats_[waited_], end - waited_ - 1);
  try {
    comm_->exchange(group, what);
  } catch (...) {
    discard();
    throw;
  }
  waited_ = end;
}

void NcclTransfers::wait_all() {
  if (!ops_.empty()) wait_through(ops_.size() - 1);
  ops_.clear();
  whats_.clear();
  waited_ = 0;
}

void NcclTransfers::abort() {
  broken_ = true;
  comm_->abort();  // the waiting thread aborts the communicator
}

void NcclTransfers::discard() {
  broken_ = true;
  ops_.clear();
  whats_.clear();
  waited_ = 0;
  comm_->abort();  // the peers' collectives with this rank can no longer complete
}

}  // namespace wt::m2n
