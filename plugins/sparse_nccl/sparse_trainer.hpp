// The sparse_nccl trainer engine: no weight source (the host refuses one); each round's patches
// are the input of send_weights. The sender checks the whole round first (patch_rules), then, if
// it holds any patch: start, update_weights on a side thread (names, dtype_names, full shapes,
// num_updates_list) while the patches are broadcast: host memory as one packed broadcast per
// round (packed_round.hpp), CUDA memory as vLLM does, per patch the indices and then the values;
// finish
// once both succeeded; then it waits for the broadcasts' memory to be released, so the caller may
// free the patches at once. An empty round does nothing at all; other trainer ranks do nothing.
#pragma once

#include "../common/async_rpc.hpp"
#include "../common/communicator.hpp"
#include "../common/round_bracket.hpp"
#include "packed_round.hpp"
#include "sparse_init_info.hpp"

#include <wt/sdk/plugin.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace wt::sparse {

class SparseTrainer final : public sdk::TrainerBase {
 public:
  // pack_host_rounds: host-memory rounds go as one packed broadcast (packed_round.hpp); false
  // sends them as vLLM's CUDA wire does (tests exercise that wire on host memory with it).
  SparseTrainer(const sdk::TrainerContext& context, const SparseInitInfo& info,
                plugins::CommunicatorFactory make_communicator = {}, bool pack_host_rounds = true);
  ~SparseTrainer() override;
  void send_weights(const sdk::SendArgs& args) override;
  void abort() override;

 private:
  sdk::HostLog log_;
  SparseInitInfo info_;
  sdk::ClientRef client_;
  bool sender_;
  std::mutex group_mu_;
  std::unique_ptr<plugins::Communicator> group_;
  std::unique_ptr<plugins::Communicator> retired_;  // a broken NCCL group (retire_broken)
  sdk::AbortSignal aborted_;                        // abort() from any thread wakes every wait
  std::vector<std::unique_ptr<plugins::AsyncRpc>> parked_;
  bool pack_host_rounds_;
  PackedRound packed_;  // a host round, packed and checked (patch_rules.hpp)
};

}  // namespace wt::sparse
