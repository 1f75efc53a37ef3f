// libwt_m2n.so — every trainer rank sends what it holds straight to the worker ranks that need
// it, on a plan computed once at trainer_init; host memory over authenticated Gloo pairs, CUDA
// memory over NCCL send/recv. docs/m2n.md.
#include "m2n_init_info.hpp"
#include "m2n_trainer.hpp"
#include "m2n_worker.hpp"

namespace {

std::unique_ptr<wt::sdk::TrainerBase> make_trainer(const wt::sdk::TrainerContext& context,
                                                   const wt::sdk::InitInfoBase& info) {
  return std::make_unique<wt::m2n::M2nTrainer>(context,
                                               static_cast<const wt::m2n::M2nInitInfo&>(info));
}

std::unique_ptr<wt::sdk::WorkerBase> make_worker(const wt::sdk::WorkerContext& context,
                                                 const nlohmann::json& init) {
  return std::make_unique<wt::m2n::M2nWorker>(context, init);
}

#ifdef WT_PLUGIN_WITH_CUDA
constexpr uint32_t kCudaMemory = WT_CAP_CUDA_MEMORY;  // over NCCL, when libnccl is found
#else
constexpr uint32_t kCudaMemory = 0;
#endif

constexpr wt::sdk::PluginDefinition kDefinition{
    WT_PLUGIN_BACKEND,
    WT_PLUGIN_VERSION,
    WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY | WT_CAP_SHARDED_SOURCE | kCudaMemory,
    &wt::m2n::M2nInitInfo::parse,
    &make_trainer,
    &make_worker};

}  // namespace

WT_DEFINE_PLUGIN(kDefinition)
