// The ipc worker engine: maps the handles an update names, validates the whole update, then
// delivers the tensors: host tensors are copied straight into the receiver's memory where the
// loader offers a destination (one copy, out of shared memory), the rest handed to load(). Host
// mappings are cached by segment name across rounds (the trainer reuses its buffers and unlinks
// their names once mapped); a mapping not used in a round is released at that round's finish. A
// mapping replaced during an update (the same name again with a larger size, or a file replaced
// under its name) is kept until that update's load has returned: tensors handed to the load may
// point into it. CUDA handles are closed at finish. Only wt segments of this user are mapped
// (ShmSegment::open).
#pragma once

#include "cuda_ipc.hpp"
#include "shm_segment.hpp"

#include <wt/sdk/plugin.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

namespace wt::ipc {

class IpcWorker final : public sdk::WorkerBase {
 public:
  IpcWorker(const sdk::WorkerContext& context, const nlohmann::json& init_info);
  void start() override;
  void receive(const nlohmann::json& update_info, const sdk::LoaderRef& loader) override;
  void finish() override;
  void abort() override;

 private:
  unsigned char* map_handle(const struct Handle& h, uint64_t need, const std::string& what);
  std::vector<unsigned char*> map_update(const struct UpdateInfo& u);

  void deliver(const std::vector<wt_tensor>& tensors, const std::vector<uint64_t>& nbytes,
               const sdk::LoaderRef& loader);

  sdk::HostLog log_;
  bool packed_ = false;
  uint64_t alignment_ = 1;  // of packed tensors' offsets
  unsigned copy_threads_ = 0;
  DLDevice device_{};
  void* stream_ = nullptr;  // the model's cudaStream_t (null: wait for the whole device)
  std::string key_;         // "cpu" or this GPU's UUID
  // active_, receiving_ and release_after_receive_ are guarded by abort_mu_: abort() may come from
  // another thread while receive() runs.
  std::mutex abort_mu_;
  bool active_ = false;
  bool receiving_ = false;
  bool release_after_receive_ = false;
  std::map<std::string, ShmSegment> shm_;  // by segment name
  std::vector<ShmSegment> retired_;        // replaced during the current update; dropped after it
  std::set<std::string> used_this_round_;
  std::map<std::string, std::unique_ptr<cuda::Imported>> cuda_;  // by handle
};

}  // namespace wt::ipc
