// libwt_sparse_nccl.so — per-round delta patches broadcast from trainer rank 0.
// This version ships the init info (parsed and validated strictly); the trainer and worker
// engines are not part of it yet, so the plugin declares no engine capabilities and libwt
// reports "has no trainer engine" instead of pretending.
#include <wt/sdk/plugin.hpp>

#include "../common/rendezvous_fields.hpp"

namespace {

struct SparseInitInfo final : wt::sdk::InitInfoBase {
  wt::plugins::RendezvousFields rendezvous;
  nlohmann::json to_json() const override { return rendezvous.to_json(); }
  int64_t rank() const override { return rendezvous.rank; }
};

std::unique_ptr<wt::sdk::InitInfoBase> parse(const nlohmann::json& fields) {
  wt::sdk::FieldReader r(fields, "init_info for backend 'sparse_nccl'");
  auto info = std::make_unique<SparseInitInfo>();
  info->rendezvous = wt::plugins::RendezvousFields::read(r);
  r.finish();
  return info;
}

constexpr wt::sdk::PluginDefinition kDefinition{
    WT_PLUGIN_BACKEND, WT_PLUGIN_VERSION, WT_CAP_SPARSE, &parse, nullptr, nullptr};

}  // namespace

WT_DEFINE_PLUGIN(kDefinition)
