// The sparse_nccl worker engine: joins the domain at init like the nccl worker (the same init
// info, vLLM's 7 keys). Per update it receives every patch the update names (host memory: the
// round as one packed broadcast, packed_round.hpp; CUDA: per patch its indices, then its values,
// as vLLM sends them), and only when all have arrived hands them to the loader's patch load as one
// batch, which checks them all against the weights it holds (name, full shape, dtype, range,
// duplicates) before applying any: a rejected round changes nothing. CUDA patches are brought to
// host memory first.
#pragma once

#include "../common/communicator.hpp"
#include "../common/worker_session.hpp"
#include "packed_round.hpp"

#include <wt/sdk/plugin.hpp>

#include <memory>
#include <mutex>
#include <span>

namespace wt::sparse {

class SparseWorker final : public sdk::WorkerBase {
 public:
  // pack_host_rounds: whether this worker reads the packed host round (an older one does not);
  // the trainer says at init which format it sends, and a format not read is refused then.
  SparseWorker(const sdk::WorkerContext& context, const nlohmann::json& init_info,
               plugins::CommunicatorFactory make_communicator = {}, bool pack_host_rounds = true);
  void start() override;
  void receive(const nlohmann::json& update_info, const sdk::LoaderRef& loader) override;
  void finish() override;
  void abort() override;

 private:
  void load_checked(std::span<const wt_sparse_patch> batch, const sdk::LoaderRef& loader);
  sdk::HostLog log_;
  DLDevice device_{kDLCPU, 0};
  std::unique_ptr<plugins::Communicator> group_;
  plugins::WorkerSession session_{"sparse_nccl"};
  bool pack_host_rounds_;
  PackedRound packed_;  // a host round's bytes, as they arrive
};

}  // namespace wt::sparse
