// One broadcast domain over Gloo (host memory): the trainer's sender is rank 0 and hosts the
// rendezvous store at master_address:master_port; every worker joins with its own rank. Shared by
// the nccl and sparse_nccl backends (compiled into each, plugins/common).
#pragma once

#include "communicator.hpp"
#include "tcp_store.hpp"

#include <gloo/rendezvous/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

namespace wt::plugins {

class BroadcastGroup final : public Communicator {
 public:
  using Options = CommunicatorOptions;
  // Blocks until every rank joined; throws sdk::Error (WT_ERR_TIMEOUT naming the rendezvous and
  // the ranks expected, WT_ERR_SYSTEM when the store cannot listen).
  explicit BroadcastGroup(const Options& options);
  ~BroadcastGroup() override;
  BroadcastGroup(const BroadcastGroup&) = delete;
  BroadcastGroup& operator=(const BroadcastGroup&) = delete;

  // Broadcasts `bytes` bytes at `data` from `root` to every rank, within the transfer deadline.
  // A peer that dies or stalls fails it (WT_ERR_TIMEOUT / WT_ERR_REMOTE) naming `what`; the group
  // is then broken for good (broken() is true) and must be made again.
  void broadcast(void* data, std::size_t bytes, int root, const std::string& what);
  void broadcast(void* data, std::size_t bytes, DLDataType, int root,
                 const std::string& what) override {
    broadcast(data, bytes, root, what);
  }
  // From any thread: the broadcast in progress, if any, stops waiting and fails with
  // WT_ERR_ABORTED, as does every later one; the group is broken. Gloo has no abort of its own:
  // this interrupts the wait the broadcast is in (in a group of a sender and workers that receive,
  // its only one); a further wait of a deeper broadcast tree still ends at the transfer deadline.
  // The destination memory is never written after the broadcast returned: the buffer Gloo would
  // write through is gone with it.
  void abort() override;
  bool broken() const override { return broken_; }
  int rank() const { return options_.rank; }
  int size() const { return options_.world_size; }

 private:
  Options options_;
  std::unique_ptr<TcpStoreServer> server_;  // rank 0 only
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::atomic<bool> broken_{false};
  std::mutex abort_mu_;                                // guards current_ and aborted_
  gloo::transport::UnboundBuffer* current_ = nullptr;  // the broadcast in progress
  bool aborted_ = false;
};

}  // namespace wt::plugins
