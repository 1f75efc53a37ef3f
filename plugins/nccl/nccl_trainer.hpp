// The nccl trainer engine, host memory over Gloo. The sender (init info rank 0) hosts the
// rendezvous, ships the worker init info on a side thread (the workers block inside that call
// until the group forms) and joins the group as rank 0; each round it starts the update, sends
// update_weights on a side thread, broadcasts every tensor (or packed chunk) and finishes only
// when both succeeded. Other trainer ranks open no endpoint, make no RPC and only iterate their
// source (their iteration may drive the sender's, e.g. FSDP gathers).
#pragma once

#include "../common/async_rpc.hpp"
#include "../common/broadcast_group.hpp"
#include "nccl_init_info.hpp"

#include <wt/sdk/plugin.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace wt::nccl {

class NcclTrainer final : public sdk::TrainerBase {
 public:
  NcclTrainer(const sdk::TrainerContext& context, const NcclInitInfo& info);
  ~NcclTrainer() override;
  void send_weights(const sdk::SendArgs& args) override;
  // From any thread: the round in progress fails with WT_ERR_ABORTED, its broadcast interrupted.
  void abort() override;

 private:
  void broadcast_round(sdk::SourceRef::Pass& pass, const std::vector<ParamMeta>& meta);

  sdk::HostLog log_;
  NcclInitInfo info_;
  sdk::ClientRef client_;
  sdk::SourceRef source_;
  bool sender_;
  std::mutex group_mu_;  // group_ is reset on the sending thread and aborted from any
  std::unique_ptr<plugins::BroadcastGroup> group_;
  std::atomic<bool> aborted_{false};
  bool collective_started_ = false;  // this round broadcast something
  // RPC threads of failed rounds: never joined on the error path (a worker may still be blocked
  // in the matching collective); joined when the engine goes, bounded by the client's deadline.
  std::vector<std::unique_ptr<plugins::AsyncRpc>> parked_;
  std::vector<unsigned char> packed_;  // the packing buffer, reused across rounds
};

}  // namespace wt::nccl
