// libwt_m2n.so — every trainer rank sends what it holds straight to the worker ranks that need
// it, on a plan computed once at trainer_init; host memory over authenticated Gloo pairs, CUDA
// memory over NCCL send/recv. docs/m2n.md.
#include "../common/cuda_capability.hpp"
#include "m2n_init_info.hpp"
#include "m2n_trainer.hpp"
#include "m2n_worker.hpp"

namespace {

constexpr auto kDefinition =
    wt::sdk::define_plugin<wt::m2n::M2nInitInfo, wt::m2n::M2nTrainer, wt::m2n::M2nWorker>(
        WT_PLUGIN_BACKEND, WT_PLUGIN_VERSION,
        WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY | WT_CAP_SHARDED_SOURCE |
            wt::plugins::kCudaMemoryIfBuilt);

}  // namespace

WT_DEFINE_PLUGIN(kDefinition)
