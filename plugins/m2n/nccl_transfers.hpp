// Transfers over NCCL, for CUDA memory: the posted messages are issued as NCCL groups of sends
// and receives on the communicator's stream (ncclSend/ncclRecv between ranks M + N, matched in
// posting order per pair; `slot` is not needed), each group when it is first waited for. discard()
// and abort() abort the communicator.
#pragma once

#include "../common/nccl_communicator.hpp"
#include "transfers.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace wt::m2n {

class NcclTransfers final : public Transfers {
 public:
  NcclTransfers(std::unique_ptr<plugins::NcclCommunicator> comm,
                std::chrono::milliseconds transfer_timeout);

  void post_send(int peer, uint64_t slot, const void* data, std::size_t bytes,
                 std::string_view what) override;
  void post_recv(int peer, uint64_t slot, void* data, std::size_t bytes,
                 std::string_view what) override;
  void wait_all() override;
  void wait_through(std::size_t n) override;
  std::size_t posted() const override { return ops_.size(); }
  void abort() override;
  bool broken() const override { return broken_ || comm_->broken(); }
  void discard() override;
  // The stream the sends and receives run on (a CUstream): copies into and out of the messages'
  // memory are queued on it, so they order with the transfers.
  void* stream() const { return comm_->stream(); }

 private:
  void post(bool send, int peer, void* data, std::size_t bytes, std::string_view what);
  std::unique_ptr<plugins::NcclCommunicator> comm_;
  std::chrono::milliseconds timeout_;
  std::vector<plugins::NcclCommunicator::P2p> ops_;
  std::vector<std::string_view> whats_;
  std::size_t waited_ = 0;
  std::atomic<bool> broken_{false};
};

}  // namespace wt::m2n
