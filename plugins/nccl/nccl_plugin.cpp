// libwt_nccl.so — dense broadcast from trainer rank 0 to every worker: host memory over Gloo, CUDA
// memory over NCCL (vLLM's unique-id mode; libnccl found at run time). docs/nccl.md.
#include "../common/cuda_capability.hpp"
#include "nccl_init_info.hpp"
#include "nccl_trainer.hpp"
#include "nccl_worker.hpp"

namespace {

constexpr auto kDefinition =
    wt::sdk::define_plugin<wt::nccl::NcclInitInfo, wt::nccl::NcclTrainer, wt::nccl::NcclWorker>(
        WT_PLUGIN_BACKEND, WT_PLUGIN_VERSION,
        WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY | WT_CAP_PACKED |
            WT_CAP_STREAMING_SOURCE | wt::plugins::kCudaMemoryIfBuilt);

}  // namespace

WT_DEFINE_PLUGIN(kDefinition)
