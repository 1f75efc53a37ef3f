// libwt_sparse_nccl.so — per-round delta patches broadcast from trainer rank 0: host memory over
// Gloo, CUDA memory over NCCL (the nccl backend's domains, plugins/common). docs/sparse_nccl.md.
#include "sparse_init_info.hpp"
#include "sparse_trainer.hpp"
#include "sparse_worker.hpp"

namespace {

std::unique_ptr<wt::sdk::TrainerBase> make_trainer(const wt::sdk::TrainerContext& context,
                                                   const wt::sdk::InitInfoBase& info) {
  return std::make_unique<wt::sparse::SparseTrainer>(
      context, static_cast<const wt::sparse::SparseInitInfo&>(info));
}

std::unique_ptr<wt::sdk::WorkerBase> make_worker(const wt::sdk::WorkerContext& context,
                                                 const nlohmann::json& init) {
  return std::make_unique<wt::sparse::SparseWorker>(context, init);
}

#ifdef WT_PLUGIN_WITH_CUDA
constexpr uint32_t kCudaMemory = WT_CAP_CUDA_MEMORY;  // over NCCL, when libnccl is found
#else
constexpr uint32_t kCudaMemory = 0;
#endif

constexpr wt::sdk::PluginDefinition kDefinition{
    WT_PLUGIN_BACKEND,
    WT_PLUGIN_VERSION,
    WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_SPARSE | WT_CAP_HOST_MEMORY | kCudaMemory,
    &wt::sparse::SparseInitInfo::parse,
    &make_trainer,
    &make_worker};

}  // namespace

WT_DEFINE_PLUGIN(kDefinition)
