// libwt_ipc.so — colocated weight sync through shared handles: POSIX shared memory for host
// tensors, cudaIpcMemHandle for CUDA tensors (when built with the CUDA toolkit).
#include "cuda_ipc.hpp"
#include "ipc_init_info.hpp"
#include "ipc_trainer.hpp"
#include "ipc_worker.hpp"

namespace {

std::unique_ptr<wt::sdk::TrainerBase> make_trainer(const wt::sdk::TrainerContext& context,
                                                   const wt::sdk::InitInfoBase& info) {
  return std::make_unique<wt::ipc::IpcTrainer>(context,
                                               static_cast<const wt::ipc::IpcInitInfo&>(info));
}

std::unique_ptr<wt::sdk::WorkerBase> make_worker(const wt::sdk::WorkerContext& context,
                                                 const nlohmann::json& init) {
  return std::make_unique<wt::ipc::IpcWorker>(context, init);
}

constexpr uint64_t kCapabilities = WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY |
                                   WT_CAP_PACKED
#ifdef WT_PLUGIN_WITH_CUDA
                                   | WT_CAP_CUDA_MEMORY
#endif
    ;

// Serves ABI versions 1 and 2: the same file also loads into a wt 0.1.0 host.
constexpr wt::sdk::PluginDefinition kDefinition{WT_PLUGIN_BACKEND, WT_PLUGIN_VERSION,
                                                kCapabilities,     &wt::ipc::IpcInitInfo::parse,
                                                &make_trainer,     &make_worker,
                                                /*oldest_abi=*/1};

}  // namespace

WT_DEFINE_PLUGIN(kDefinition)
