// A plugin built with the SDK that serves ABI versions 1 and 2 (oldest_abi = 1). Backend
// "sdkrange": the trainer sends float32 tensors inline, {"inline": [{"name", "values"}]}, one
// update per round; the worker hands them to the loader.
#include <wt/sdk/plugin.hpp>

#include <cstring>
#include <vector>

namespace {

using wt::sdk::fail;

struct Info final : wt::sdk::InitInfoBase {
  int64_t rank_ = 0;
  nlohmann::json to_json() const override { return {{"rank", rank_}}; }
  int64_t rank() const override { return rank_; }
};

std::unique_ptr<wt::sdk::InitInfoBase> parse(const nlohmann::json& fields) {
  wt::sdk::FieldReader r(fields, "init_info for backend 'sdkrange'");
  auto info = std::make_unique<Info>();
  info->rank_ = r.opt_int("rank", 0);
  r.finish();
  return info;
}

class Trainer final : public wt::sdk::TrainerBase {
 public:
  explicit Trainer(const wt::sdk::TrainerContext& c) : c_(c) {
    c_.client.init_weight_transfer_engine("{}");
  }
  void send_weights(const wt::sdk::SendArgs& args) override {
    c_.client.start_weight_update();
    nlohmann::json items = nlohmann::json::array();
    {
      auto pass = c_.source.begin();
      wt_tensor t{};
      while (pass.next(&t)) {
        const DLTensor& d = t.tensor;
        int64_t n = 1;
        for (int i = 0; i < d.ndim; ++i) n *= d.shape[i];
        std::vector<float> v(static_cast<std::size_t>(n));
        std::memcpy(v.data(), static_cast<const char*>(d.data) + d.byte_offset, v.size() * 4);
        items.push_back({{"name", t.name}, {"values", v}});
      }
    }
    c_.client.update_weights(nlohmann::json{{"inline", items}}.dump());
    c_.client.finish_weight_update(args.weight_version);
  }
  void abort() override {}

 private:
  wt::sdk::TrainerContext c_;
};

class Worker final : public wt::sdk::WorkerBase {
 public:
  void start() override {}
  void receive(const nlohmann::json& u, const wt::sdk::LoaderRef& loader) override {
    if (!u.contains("inline")) fail(WT_ERR_INVALID_ARGUMENT, "update_info carries no tensors");
    std::vector<std::string> names;
    std::vector<std::vector<float>> values;
    std::vector<int64_t> shapes;
    for (const auto& x : u["inline"]) {
      names.push_back(x["name"].get<std::string>());
      values.push_back(x["values"].get<std::vector<float>>());
    }
    shapes.resize(names.size());
    std::vector<wt_tensor> ts(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      shapes[i] = static_cast<int64_t>(values[i].size());
      ts[i].name = names[i].c_str();
      ts[i].tensor =
          DLTensor{values[i].data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &shapes[i], nullptr, 0};
    }
    loader.load(ts);
  }
  void finish() override {}
  void abort() override {}
};

std::unique_ptr<wt::sdk::TrainerBase> make_trainer(const wt::sdk::TrainerContext& c,
                                                   const wt::sdk::InitInfoBase&) {
  return std::make_unique<Trainer>(c);
}
std::unique_ptr<wt::sdk::WorkerBase> make_worker(const wt::sdk::WorkerContext&,
                                                 const nlohmann::json&) {
  return std::make_unique<Worker>();
}

constexpr wt::sdk::PluginDefinition kDefinition{
    "sdkrange",      "1.0.0",       WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY,
    &parse,          &make_trainer, &make_worker,
    /*oldest_abi=*/1};

}  // namespace

WT_DEFINE_PLUGIN(kDefinition)
