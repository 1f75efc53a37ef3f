// The m2n trainer engine, one per trainer rank. At creation every rank declares what it holds
// (its source's metadata, sharded or whole), the holdings are gathered over the trainer group and
// every rank computes the same plan from them and the inference layout; rank 0 hosts the
// rendezvous, ships the plan to the workers in their init info, and all trainer and worker ranks
// form one authenticated Gloo mesh. Each round every rank sends its planned pieces straight to the
// worker ranks that need them (in place from the source's memory when a piece's bytes lie back to
// back, packed otherwise); rank 0 brackets the round on the inference side (start, update naming
// the round's tensors, finish).
#pragma once

#include "../common/async_rpc.hpp"
#include "../common/communicator.hpp"
#include "../common/device_bytes.hpp"
#include "../common/param_list.hpp"
#include "../common/round_signal.hpp"
#include "../common/tcp_store.hpp"
#include "fp8_sender.hpp"
#include "m2n_holdings.hpp"
#include "m2n_init_info.hpp"
#include "m2n_plan.hpp"
#include "m2n_schedule.hpp"
#include "m2n_wire.hpp"
#include "round_table.hpp"
#include "transfers.hpp"

#include <wt/sdk/host_log.hpp>
#include <wt/sdk/plugin.hpp>

#include <memory>
#include <vector>

namespace wt::m2n {

class M2nTrainer final : public sdk::TrainerBase {
 public:
  M2nTrainer(const sdk::TrainerContext& context, const M2nInitInfo& info);
  ~M2nTrainer() override;
  void send_weights(const sdk::SendArgs& args) override;
  void abort() override;

  const Plan& plan() const { return plan_; }

 private:
  // trainer_init in steps: what this rank declares; the mesh's options; what every trainer rank
  // shares (the trainer group's all-gather: holdings, and rank 0's secrets or NCCL unique id);
  // this rank's schedule, compiled once from the plan; and the connection to the workers (rank 0
  // runs their init call beside it).
  void declare_model();
  plugins::CommunicatorOptions mesh_options(const M2nInitInfo& info) const;
  struct Gathered {
    std::vector<RankHoldings> per_rank;  // every rank's holdings
    std::string unique_id;               // CUDA: rank 0's NCCL unique id
  };
  Gathered gather(const sdk::GroupRef& group, plugins::CommunicatorOptions& o,
                  std::unique_ptr<plugins::TcpStoreServer>& store);
  void compile(const std::vector<RankHoldings>& per_rank, const M2nInitInfo& info);
  nlohmann::json worker_init_info(const M2nInitInfo& info, const plugins::CommunicatorOptions& o,
                                  const std::string& unique_id) const;
  void connect(plugins::CommunicatorOptions o, const std::string& unique_id,
               std::unique_ptr<plugins::TcpStoreServer> store, const M2nInitInfo& info);

  void run_round(const sdk::SendArgs& args, uint32_t round,
                 const plugins::RoundSignal::Watch* watch);
  // Posts the round's frames and pieces, then waits for them; a failure leaves the mesh broken.
  void send_round(const std::vector<wt_tensor>& tensors, uint32_t round);
  void post_round(const std::vector<wt_tensor>& tensors, uint32_t round);

  sdk::HostLog log_;
  M2nInitInfo info_;
  sdk::ClientRef client_;
  sdk::SourceRef source_;
  int rank_ = 0, ranks_ = 1;
  int cuda_device_ = -1;         // -1: host memory over Gloo pairs; else CUDA memory over NCCL
  std::vector<ParamMeta> meta_;  // as declared at trainer_init: the plan's inputs
  // The round's parameters as the plan names them: meta_, or with wire_dtype float8_e4m3fn each
  // FP8 weight's values and scales (fp8_sender.hpp), which fp8_ makes each round.
  std::vector<ParamMeta> wire_meta_;
  std::unique_ptr<Fp8Sender> fp8_;
  std::vector<std::string> names_;
  Plan plan_;
  std::unique_ptr<PlanIndex> index_;
  std::vector<Transfer> sends_;    // this rank's pieces, in schedule order
  std::vector<Message> messages_;  // how they travel (messages_of)
  std::vector<uint64_t> pair_pieces_, pair_bytes_, pair_digests_;  // per worker rank
  uint32_t round_ = 0;
  std::vector<Frame> frames_;  // the round's frames, one per worker rank
  std::vector<std::string> frame_whats_;
  // The round as a table (round_table.hpp), compiled at the first round and again only when the
  // source's strides change; what executing it reuses round after round: the staging ring the
  // packed messages travel through, and where each tensor and packed message is.
  const RoundTable& table_for(const std::vector<wt_tensor>& tensors);
  std::vector<std::vector<int64_t>> compact_;        // per parameter: its local slice's strides
  std::vector<std::vector<int64_t>> table_strides_;  // per parameter: what the table assumed
  RoundTable table_;
  bool tabled_ = false;
  StagingRing ring_;
  std::vector<unsigned char> staging_;
  plugins::DeviceBytes device_staging_;  // CUDA
  std::vector<std::size_t> packed_ops_;  // per packed message: its posted() number
  std::vector<uint64_t> offsets_;        // per message: its place in the ring
  std::vector<unsigned char*> bases_;    // per parameter: its first byte
  std::vector<unsigned char*> mapped_;   // per parameter: the first byte last mapped in
  // Maps in the source memory of tensors not seen at that address before (host memory).
  void map_new_source_memory(const std::vector<wt_tensor>& tensors);
  std::vector<CopyBatchItem> batch_;
  unsigned copy_threads_ = 1;
  plugins::DeviceBytes device_frames_;    // CUDA: the frames, where NCCL can send them from
  std::unique_ptr<Transfers> transfers_;  // after what it points at: destroyed first
  // CUDA, M >= 2: NCCL tells no rank that another gave a round up; the round signal does
  // (round_signal.hpp), over a store rank 0 hosts for the trainer ranks alone.
  std::unique_ptr<plugins::TcpStoreServer> signal_store_;
  std::unique_ptr<plugins::RoundSignal> signal_;
  plugins::DescribedParams update_text_;
  sdk::AbortSignal aborted_;
  // RPC threads of failed rounds (declared after the signal they wake: destroyed first).
  std::vector<std::unique_ptr<plugins::AsyncRpc>> parked_;
};

}  // namespace wt::m2n
