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
#include "../common/update_text_cache.hpp"
#include "engine_layout.hpp"
#include "m2n_plan.hpp"
#include "m2n_schedule.hpp"
#include "m2n_wire.hpp"
#include "round_table.hpp"
#include "transfers.hpp"

#include <wt/sdk/host_log.hpp>
#include <wt/sdk/parallel_copy.hpp>
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
  // After the frames, the round in three steps: where each parameter lands (the loader's memory
  // where it offers some, else ours); every message posted and every packed one unpacked (the
  // compiled table, executed); the parameters handed over.
  void place(const plugins::ParamList& list, const sdk::LoaderRef& loader);
  void receive_messages(uint32_t round);
  void copy_ties();  // a tied name the loader keeps in memory of its own gets the same bytes
  void hand_over(const sdk::LoaderRef& loader);
  // Refuses an update that does not name exactly the planned parameters, as planned.
  void check_update(const plugins::ParamList& list) const;
  // The model the host says this worker holds, against what the plan will send this rank
  // (check_worker).
  void check_held(const std::vector<ParamMeta>& held) const;

  sdk::HostLog log_;
  int worker_rank_ = 0, trainers_ = 1;
  Plan plan_;
  std::unique_ptr<PlanIndex> index_;
  // The engine's tensors (the plan's own parameters when the trainer sent no engine layout), what
  // the host holds and is handed: each planned parameter's slice lies back to back in one.
  EngineLayout engine_;
  std::vector<uint64_t> engine_bytes_;
  uint32_t round_ = 0;
  std::mutex mu_;  // guards active_
  bool active_ = false;
  plugins::UpdateTextCache update_text_;
  // This rank's side of a round, worked out from the round's parameter names and kept while they
  // stay the same: a full resync names the same tensors every round, and at the scale m2n plans
  // for (a 1 T model, 256 trainer ranks) working it out takes seconds.
  struct Schedule {
    std::vector<std::string> names;
    std::vector<uint64_t> pieces, bytes, digests;  // per trainer rank, as its frame says them
    // Per parameter: the box of it this rank holds (its TP slice), that slice's shape, compact
    // strides and bytes.
    std::vector<Box> needed;
    std::vector<std::vector<int64_t>> shapes, strides;
    std::vector<uint64_t> bytes_of;
    struct At {
      uint32_t tensor = 0;  // the engine tensor its slice lies in (engine_layout.hpp)
      uint64_t byte_offset = 0;
    };
    std::vector<At> engine_at;
    RoundTable table;  // the round's messages, compiled (round_table.hpp)
  };
  const Schedule& schedule_for(const plugins::ParamList& list);
  Schedule schedule_;
  bool scheduled_ = false;
  // What executing a round reuses, round after round: the staging ring packed messages arrive
  // in, and where each parameter and message is.
  StagingRing ring_;
  std::vector<unsigned char> staging_;
  plugins::DeviceBytes device_staging_;                // CUDA
  std::vector<std::size_t> buffered_;                  // the packed messages, in the order received
  std::vector<uint64_t> offsets_;                      // per message: its place in the ring
  std::vector<std::size_t> ops_;                       // per message: its posted() number
  std::vector<unsigned char*> places_;                 // per parameter: where it lands
  std::vector<unsigned char*> engine_places_;          // per engine tensor: where it lies
  std::vector<bool> offered_;                          // per engine tensor: the loader's memory
  std::vector<std::unique_ptr<unsigned char[]>> own_;  // per engine tensor not offered: ours
  std::vector<plugins::DeviceBytes> own_device_;       // CUDA
  std::vector<CopyBatchItem> batch_;
  std::vector<wt_tensor> views_;
  unsigned copy_threads_ = default_copy_threads();
  int device_ = -1;            // -1: host memory over Gloo pairs; else the CUDA device (NCCL)
  void* stream_ = nullptr;     // CUDA: the model's stream, which the consumer's copies run on
  std::vector<Frame> frames_;  // the round's frames, one per trainer rank
  std::vector<std::string> frame_whats_;  // and the names errors give them
  plugins::DeviceBytes device_frames_;    // CUDA: where the frames are received
  std::unique_ptr<Transfers> transfers_;
};

}  // namespace wt::m2n
