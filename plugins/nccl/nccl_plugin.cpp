// libwt_nccl.so — dense broadcast from trainer rank 0 to every worker: host memory over Gloo, CUDA
// memory over NCCL (vLLM's unique-id mode; libnccl found at run time). docs/nccl.md.
#include "nccl_init_info.hpp"
#include "nccl_trainer.hpp"
#include "nccl_worker.hpp"

namespace {

std::unique_ptr<wt::sdk::TrainerBase> make_trainer(const wt::sdk::TrainerContext& context,
                                                   const wt::sdk::InitInfoBase& info) {
  return std::make_unique<wt::nccl::NcclTrainer>(context,
                                                 static_cast<const wt::nccl::NcclInitInfo&>(info));
}

std::unique_ptr<wt::sdk::WorkerBase> make_worker(const wt::sdk::WorkerContext& context,
                                                 const nlohmann::json& init) {
  return std::make_unique<wt::nccl::NcclWorker>(context, init);
}

#ifdef WT_PLUGIN_WITH_CUDA
constexpr uint32_t kCudaMemory = WT_CAP_CUDA_MEMORY;  // over NCCL, when libnccl is found
#else
constexpr uint32_t kCudaMemory = 0;
#endif

constexpr wt::sdk::PluginDefinition kDefinition{
    WT_PLUGIN_BACKEND,
    WT_PLUGIN_VERSION,
    WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY | WT_CAP_PACKED | kCudaMemory |
        WT_CAP_STREAMING_SOURCE,
    &wt::nccl::NcclInitInfo::parse,
    &make_trainer,
    &make_worker};

}  // namespace

WT_DEFINE_PLUGIN(kDefinition)
