// The ipc trainer engine: colocated sender. See ipc_wire.hpp for what goes on the wire.
#pragma once

#include "../common/async_rpc.hpp"
#include "cuda_ipc.hpp"
#include "ipc_init_info.hpp"
#include "shared_mappings.hpp"
#include "shm_segment.hpp"

#include <wt/sdk/parallel_copy.hpp>
#include <wt/sdk/plugin.hpp>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <vector>

namespace wt::ipc {

using plugins::AsyncRpc;

class IpcTrainer final : public sdk::TrainerBase {
 public:
  IpcTrainer(const sdk::TrainerContext& context, const IpcInitInfo& info);
  ~IpcTrainer() override;
  void send_weights(const sdk::SendArgs& args) override;
  void abort() override { aborted_.abort(); }

 private:
  // One packed buffer: host shared memory or a CUDA allocation.
  struct Buffer {
    std::unique_ptr<ShmSegment> shm;
    std::unique_ptr<cuda::DeviceBuffer> device;
    int cuda_device = -1;  // -1: host
    unsigned char* data() const { return shm ? shm->data() : device->data(); }
    std::size_t size() const { return shm ? shm->size() : device->size(); }
  };
  struct Chunk {
    int cuda_device = -1;
    std::vector<ParamMeta> params;
    std::vector<uint64_t> sizes;
    std::vector<CopyJob> host_copies;  // contiguous host tensors, copied together at flush
    uint64_t used = 0;
  };

  void round(const sdk::SendArgs& args);
  void send_unpacked(sdk::SourceRef::Pass& pass);
  void send_packed(sdk::SourceRef::Pass& pass);
  void flush(Chunk& chunk, std::size_t buffer_index);
  // Waits for the oldest in-flight update, tells every rank how it went, and releases what it used.
  void sync_one();
  uint64_t packed_buffer_bytes();
  void prepare_host_buffers();
  Buffer& buffer_for(std::size_t index, int cuda_device);
  // Every rank's handle maps, merged at the sender (its own first, then other ranks in order).
  std::vector<nlohmann::json> gather_and_merge(const std::vector<nlohmann::json>& mine,
                                               const std::vector<ParamMeta>& params);
  void release_all();
  void end_of_round();  // drops what only this round's workers could still hold open
  cuda::Exported stage_for_export(const void* src, const std::string& name, int cuda_device,
                                  uint64_t nbytes);
  void check_not_aborted() const;
  std::string key_for(int cuda_device);      // "cpu", or the device's UUID (cached)
  uint64_t align_up(uint64_t offset) const;  // to packed_alignment

  sdk::HostLog log_;
  IpcInitInfo info_;
  sdk::ClientRef client_;
  sdk::SourceRef source_;
  sdk::GroupRef group_;
  bool sender_;
  unsigned copy_threads_;
  uint64_t buffer_bytes_ = 0;         // packed mode: one buffer's size (packed_buffer_bytes())
  sdk::AbortSignal aborted_;          // abort() from any thread wakes every wait
  void* stream_ = nullptr;            // this round's producer stream (null: synchronise the device)
  std::map<int, std::string> uuids_;  // by CUDA device index

  std::vector<Buffer> buffers_;          // packed mode, by index
  std::vector<Buffer> retired_buffers_;  // replaced this round; freed at its end
  std::vector<std::unique_ptr<cuda::DeviceBuffer>> staging_;  // staged exports of this round
  bool warned_staging_ = false;
  std::map<std::string, ShmSegment> by_name_;        // unpacked host tensors, reused across rounds
  std::deque<std::unique_ptr<AsyncRpc>> in_flight_;  // oldest first; packed: up to buffers - 1
  std::vector<std::unique_ptr<AsyncRpc>> parked_;  // failed rounds' RPC threads; joined at destroy
  int64_t sent_ = 0, completed_ = 0;               // packed chunks launched / confirmed this round
  bool started_ = false;              // this round's start_weight_update reached the worker
  bool update_failed_ = false;        // the update RPC itself failed (the worker ended its session)
  bool first_update_failed_ = false;  // ... and it was the round's first update
  int64_t rounds_ok_ = 0;
  double pack_s_ = 0, wait_s_ = 0;  // per round, for the debug log
  int64_t exported_in_place_ = 0;   // host tensors found already in /dev/shm, this round
};

}  // namespace wt::ipc
