// The m2n worker engine, one per worker rank (rank_offset - 1 of the worker init info). It reads
// the plan the trainer shipped (checking its coverage and digest), joins the mesh as rank
// trainer_ranks + worker rank, and per update receives its TP slice of every planned parameter
// from the trainer ranks the plan names: frames first (a trainer rank out of step or sending
// another amount is refused before any weight byte lands), then every piece, straight into the
// loader's destination where the piece's bytes lie back to back in it, else into a buffer that
// is unpacked into place. Every parameter is handed over before receive returns.
#pragma once

#include "../common/device_bytes.hpp"
#include "../common/param_list.hpp"
#include "m2n_plan.hpp"
#include "m2n_schedule.hpp"
#include "m2n_wire.hpp"
#include "transfers.hpp"

#include <wt/sdk/host_log.hpp>
#include <wt/sdk/plugin.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace wt::m2n {

class M2nWorker final : public sdk::WorkerBase {
 public:
  M2nWorker(const sdk::WorkerContext& context, const nlohmann::json& init_info);
  ~M2nWorker() override;
  void start() override;
  void receive(const nlohmann::json& update_info, const sdk::LoaderRef& loader) override;
  void receive_text(const char* update_info, const sdk::LoaderRef& loader) override;
  void finish() override;
  void abort() override;

  int worker_rank() const { return worker_rank_; }

 private:
  template <typename Receive>
  void refusing_closes_pairs(Receive&& receive);
  void receive_list(const plugins::ParamList& list, const sdk::LoaderRef& loader);
  // After the frames: every piece into place, then handed over to the loader.
  void receive_pieces(const plugins::ParamList& list, const std::vector<Transfer>& receives,
                      const std::vector<Message>& messages, uint32_t round,
                      const sdk::LoaderRef& loader);
  // Refuses an update that does not name exactly the planned parameters, as planned.
  void check_update(const plugins::ParamList& list) const;
  // The model the host says this worker holds, against what the plan will send this rank
  // (check_worker).
  void check_held(const std::vector<ParamMeta>& held) const;

  sdk::HostLog log_;
  int worker_rank_ = 0, trainers_ = 1;
  Plan plan_;
  std::unique_ptr<PlanIndex> index_;
  uint32_t round_ = 0;
  std::mutex mu_;  // guards active_
  bool active_ = false;
  std::string last_update_text_;
  plugins::ParamList last_list_;
  // This rank's side of a round, worked out from the round's parameter names and kept while they
  // stay the same: a full resync names the same tensors every round, and at the scale m2n plans
  // for (a 1 T model, 256 trainer ranks) working it out takes seconds.
  struct Schedule {
    std::vector<std::string> names;
    std::vector<Transfer> receives;
    std::vector<uint64_t> pieces, bytes, digests;  // per trainer rank, as its frame says them
    std::vector<Message> messages;                 // how the pieces travel (messages_of)
  };
  const Schedule& schedule_for(const plugins::ParamList& list);
  Schedule schedule_;
  bool scheduled_ = false;
  int device_ = -1;         // -1: host memory over Gloo pairs; else the CUDA device (NCCL)
  void* stream_ = nullptr;  // CUDA: the model's stream, which the consumer's copies run on
  plugins::DeviceBytes device_frames_;  // CUDA: where the frames are received
  std::unique_ptr<Transfers> transfers_;
};

}  // namespace wt::m2n
