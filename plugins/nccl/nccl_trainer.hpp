// The nccl trainer engine. The sender (init info rank 0) makes the broadcast domain, host memory
// over Gloo (it hosts the rendezvous store) or CUDA memory over NCCL (it mints the unique id),
// ships the worker init info on a side thread (the workers block inside that call until the
// domain forms) and joins as rank 0; each round it starts the update, sends update_weights on a
// side thread, broadcasts every tensor (or packed chunk: packing the next one overlaps the
// broadcast of the previous) and finishes only when both succeeded. Other trainer ranks open no
// endpoint, make no RPC and only iterate their source (their iteration may drive the sender's,
// e.g. FSDP gathers).
#pragma once

#include "../common/async_rpc.hpp"
#include "../common/communicator.hpp"
#include "../common/device_bytes.hpp"
#include "../common/param_list.hpp"
#include "../common/round_bracket.hpp"
#include "nccl_init_info.hpp"

#include <wt/sdk/plugin.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace wt::nccl {

class NcclTrainer final : public sdk::TrainerBase {
 public:
  // make_communicator: how the sender makes its domain; empty: Gloo or NCCL, by `device` (tests
  // pass a spy).
  NcclTrainer(const sdk::TrainerContext& context, const NcclInitInfo& info,
              plugins::CommunicatorFactory make_communicator = {});
  ~NcclTrainer() override;
  void send_weights(const sdk::SendArgs& args) override;
  // From any thread: the round in progress fails with WT_ERR_ABORTED, its broadcast interrupted.
  void abort() override;

 private:
  void broadcast_round(sdk::SourceRef::Pass& pass, const std::vector<ParamMeta>& meta,
                       plugins::RoundBracket::Round& round);
  // Where packed chunk buffer `slot` lives (host vector or CUDA memory), grown to `bytes`.
  unsigned char* packed_buffer(std::size_t slot, uint64_t bytes);
  void copy_in(unsigned char* dst, const unsigned char* src, std::size_t n);

  sdk::HostLog log_;
  NcclInitInfo info_;
  int cuda_device_;  // -1: host memory
  sdk::ClientRef client_;
  sdk::SourceRef source_;
  bool sender_;
  std::mutex group_mu_;  // group_ is reset on the sending thread and aborted from any
  std::unique_ptr<plugins::Communicator> group_;
  std::unique_ptr<plugins::Communicator> retired_;  // a broken NCCL group (retire_broken)
  sdk::AbortSignal aborted_;                        // abort() from any thread wakes every wait
  // RPC threads of failed rounds: never joined on the error path (a worker may still be blocked
  // in the matching collective); joined when the engine goes, bounded by the client's deadline.
  // Declared after group_ and retired_, so destroyed first: teardown tells the workers (a parked
  // end_weight_update answers) before a communicator is finalized or aborted.
  std::vector<std::unique_ptr<plugins::AsyncRpc>> parked_;
  std::vector<std::vector<unsigned char>> host_buffers_;  // packed chunks in rotation, reused
  std::vector<plugins::DeviceBytes> device_buffers_;
  std::vector<unsigned char> contiguous_;  // a non-compact host tensor, made compact
  plugins::DescribedParams update_text_;   // the update info, kept while the metadata is the same
};

}  // namespace wt::nccl
