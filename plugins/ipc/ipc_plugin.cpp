// libwt_ipc.so — colocated weight sync through shared handles: POSIX shared memory for host
// tensors, cudaIpcMemHandle for CUDA tensors (when built with the CUDA toolkit).
#include "../common/cuda_capability.hpp"
#include "ipc_init_info.hpp"
#include "ipc_trainer.hpp"
#include "ipc_worker.hpp"

namespace {

// Serves ABI versions 1 and 2: the same file also loads into a wt 0.1.0 host.
constexpr auto kDefinition =
    wt::sdk::define_plugin<wt::ipc::IpcInitInfo, wt::ipc::IpcTrainer, wt::ipc::IpcWorker>(
        WT_PLUGIN_BACKEND, WT_PLUGIN_VERSION,
        WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY | WT_CAP_PACKED |
            wt::plugins::kCudaMemoryIfBuilt,
        /*oldest_abi=*/1);

}  // namespace

WT_DEFINE_PLUGIN(kDefinition)
