// libwt_nccl.so — dense broadcast from trainer rank 0 to every worker.
// This version ships the init info (parsed and validated strictly); the trainer and worker
// engines are not part of it yet, so the plugin declares no engine capabilities and libwt
// reports "has no trainer engine" instead of pretending.
#include <wt/sdk/plugin.hpp>

#include "../common/rendezvous_fields.hpp"

namespace {

using wt::sdk::FieldReader;

struct NcclInitInfo final : wt::sdk::InitInfoBase {
  wt::plugins::RendezvousFields rendezvous;
  bool packed = true;
  int64_t packed_buffer_size_bytes = int64_t{1} << 30;
  int64_t packed_num_buffers = 2;

  nlohmann::json to_json() const override {
    auto j = rendezvous.to_json();
    j["packed"] = packed;
    j["packed_buffer_size_bytes"] = packed_buffer_size_bytes;
    j["packed_num_buffers"] = packed_num_buffers;
    return j;
  }
  int64_t rank() const override { return rendezvous.rank; }
};

std::unique_ptr<wt::sdk::InitInfoBase> parse(const nlohmann::json& fields) {
  FieldReader r(fields, "init_info for backend 'nccl'");
  auto info = std::make_unique<NcclInitInfo>();
  info->rendezvous = wt::plugins::RendezvousFields::read(r);
  info->packed = r.opt_bool("packed", true);
  info->packed_buffer_size_bytes =
      r.opt_int("packed_buffer_size_bytes", info->packed_buffer_size_bytes);
  info->packed_num_buffers = r.opt_int("packed_num_buffers", 2);
  r.finish();
  if (info->packed_buffer_size_bytes <= 0)
    wt::sdk::fail_field("packed_buffer_size_bytes", WT_ERR_INVALID_ARGUMENT,
                        "invalid {}: field 'packed_buffer_size_bytes' must be > 0", r.what());
  if (info->packed_num_buffers < 1)
    wt::sdk::fail_field("packed_num_buffers", WT_ERR_INVALID_ARGUMENT,
                        "invalid {}: field 'packed_num_buffers' must be >= 1", r.what());
  return info;
}

constexpr wt::sdk::PluginDefinition kDefinition{
    WT_PLUGIN_BACKEND, WT_PLUGIN_VERSION, 0, &parse, nullptr, nullptr};

}  // namespace

WT_DEFINE_PLUGIN(kDefinition)
