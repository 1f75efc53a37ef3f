// libwt_sparse_nccl.so — per-round delta patches broadcast from trainer rank 0: host memory over
// Gloo, CUDA memory over NCCL (the nccl backend's domains, plugins/common). docs/sparse_nccl.md.
#include "../common/cuda_capability.hpp"
#include "sparse_init_info.hpp"
#include "sparse_trainer.hpp"
#include "sparse_worker.hpp"

namespace {

constexpr auto kDefinition =
    wt::sdk::define_plugin<wt::sparse::SparseInitInfo, wt::sparse::SparseTrainer,
                           wt::sparse::SparseWorker>(WT_PLUGIN_BACKEND, WT_PLUGIN_VERSION,
                                                     WT_CAP_TRAINER | WT_CAP_WORKER |
                                                         WT_CAP_SPARSE | WT_CAP_HOST_MEMORY |
                                                         wt::plugins::kCudaMemoryIfBuilt);

}  // namespace

WT_DEFINE_PLUGIN(kDefinition)
