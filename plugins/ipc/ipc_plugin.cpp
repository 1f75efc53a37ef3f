#include <wt/sdk/plugin.hpp>
namespace {
struct IpcInitInfo final : wt::sdk::InitInfoBase {
  int64_t rank_ = 0;
  nlohmann::json to_json() const override { return {{"rank", rank_}}; }
  int64_t rank() const override { return rank_; }
};
std::unique_ptr<wt::sdk::InitInfoBase> parse(const nlohmann::json& fields) {
  wt::sdk::FieldReader r(fields, "init_info for backend 'ipc'");
  auto info = std::make_unique<IpcInitInfo>();
  info->rank_ = r.get_int("rank");
  r.finish();
  return info;
}
constexpr wt::sdk::PluginDefinition kDefinition{WT_PLUGIN_BACKEND, WT_PLUGIN_VERSION, 0, &parse, nullptr, nullptr};
}  // namespace
WT_DEFINE_PLUGIN(kDefinition)
