// libwt_sparse_nccl.so — per-round delta patches broadcast from trainer rank 0.
// This version ships the init info (parsed and validated strictly); the trainer and worker
// engines are not part of it yet, so the plugin declares no engine capabilities and libwt
// reports "has no trainer engine" instead of pretending.
#include <wt/sdk/plugin.hpp>

namespace {

using wt::sdk::FieldReader;

struct SparseInitInfo final : wt::sdk::InitInfoBase {
  std::string master_address;
  int64_t master_port = 0;
  int64_t world_size = 0;
  int64_t rank_ = 0;

  nlohmann::json to_json() const override {
    return {{"master_address", master_address},
            {"master_port", master_port},
            {"world_size", world_size},
            {"rank", rank_}};
  }
  int64_t rank() const override { return rank_; }
};

std::unique_ptr<wt::sdk::InitInfoBase> parse(const nlohmann::json& fields) {
  FieldReader r(fields, "init_info for backend 'sparse_nccl'");
  auto info = std::make_unique<SparseInitInfo>();
  info->master_address = r.get_string("master_address");
  info->master_port = r.get_int("master_port");
  info->world_size = r.get_int("world_size");
  info->rank_ = r.get_int("rank");
  r.finish();
  if (info->master_port < 1 || info->master_port > 65535)
    wt::sdk::fail(WT_ERR_INVALID_ARGUMENT,
                  "invalid {}: field 'master_port' must be in 1..65535, got {}", r.what(),
                  info->master_port);
  if (info->world_size < 2)
    wt::sdk::fail(
        WT_ERR_INVALID_ARGUMENT,
        "invalid {}: field 'world_size' must be at least 2 (the trainer plus one worker), got {}",
        r.what(), info->world_size);
  if (info->rank_ < 0)
    wt::sdk::fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: field 'rank' must be >= 0, got {}",
                  r.what(), info->rank_);
  return info;
}

constexpr wt::sdk::PluginDefinition kDefinition{
    WT_PLUGIN_BACKEND, WT_PLUGIN_VERSION, WT_CAP_SPARSE, &parse, nullptr, nullptr};

}  // namespace

WT_DEFINE_PLUGIN(kDefinition)
