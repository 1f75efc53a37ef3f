#include <wt/engine.hpp>

#include <wt/log.hpp>

#include "internal.hpp"

#include <fmt/format.h>

namespace wt {
namespace {

constexpr std::size_t kErrCap = 4096;

std::string reason(const char* msg) {
  return msg != nullptr && *msg ? msg : "no reason given";
}

}  // namespace

TrainerEngine::TrainerEngine(std::shared_ptr<const Plugin> plugin, wt_trainer* engine)
    : plugin_(std::move(plugin)), engine_(engine) {}

TrainerEngine::~TrainerEngine() {
  plugin_->api().trainer->destroy(engine_);
}

void TrainerEngine::send_weights(const SendOptions& options) {
  wt_send_args args{};
  args.struct_size = sizeof args;
  args.abi_version = WT_ABI_VERSION;
  args.weight_version = options.weight_version ? options.weight_version->c_str() : nullptr;
  args.patches = options.patches.empty() ? nullptr : options.patches.data();
  args.num_patches = options.patches.size();
  const auto* t = plugin_->api().trainer;
  wt_status s = t->send_weights(engine_, &args);
  if (s != WT_OK)
    throw Error(s, fmt::format("{} send_weights failed: {}", plugin_->backend(),
                               reason(t->last_error(engine_))));
}

void TrainerEngine::abort() {
  const auto* t = plugin_->api().trainer;
  wt_status s = t->abort(engine_);
  if (s != WT_OK) throw Error(s, fmt::format("{} abort failed", plugin_->backend()));
}

std::unique_ptr<TrainerEngine> trainer_init(const InitInfo& info, Client& client,
                                            WeightSource* source, TrainerGroup* group) {
  const ParsedInitInfo& parsed = info.parsed();  // loads the plugin on first use
  const auto& plugin = parsed.plugin;
  const auto& api = plugin->api();
  if (!(api.capabilities & WT_CAP_TRAINER))
    throw Error(WT_ERR_INCOMPATIBLE, fmt::format("backend '{}' ({}) has no trainer engine",
                                                 plugin->backend(), plugin->path()));
  wt_trainer* engine = nullptr;
  char err[kErrCap] = {0};
  logger()->info("trainer_init: backend {} rank {}", info.backend(),
                 api.init_info->rank(parsed.object));
  wt_status s = api.trainer->create(plugin->host(), parsed.object, client.c_client(),
                                    source ? source->c_source() : nullptr,
                                    group ? group->c_group() : nullptr, &engine, err, sizeof err);
  if (s != WT_OK || engine == nullptr)
    throw Error(s != WT_OK ? s : WT_ERR_INTERNAL,
                fmt::format("{} trainer_init failed: {}", info.backend(), reason(err)));
  return std::make_unique<TrainerEngine>(plugin, engine);
}

WorkerEngine::WorkerEngine(std::shared_ptr<const Plugin> plugin, wt_worker* engine)
    : plugin_(std::move(plugin)), engine_(engine) {}

WorkerEngine::~WorkerEngine() {
  plugin_->api().worker->destroy(engine_);
}

std::unique_ptr<WorkerEngine> WorkerEngine::create(const std::string& backend,
                                                   std::string_view init_info_json,
                                                   DLDevice device) {
  auto plugin = Registry::instance().get(backend);
  const auto& api = plugin->api();
  if (!(api.capabilities & WT_CAP_WORKER))
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("backend '{}' ({}) has no worker engine", backend, plugin->path()));
  wt_worker_options opts{};
  opts.struct_size = sizeof opts;
  opts.abi_version = WT_ABI_VERSION;
  opts.device = device;
  std::string json(init_info_json);
  wt_worker* engine = nullptr;
  char err[kErrCap] = {0};
  wt_status s = api.worker->create(plugin->host(), json.c_str(), &opts, &engine, err, sizeof err);
  if (s != WT_OK || engine == nullptr)
    throw Error(s != WT_OK ? s : WT_ERR_INTERNAL,
                fmt::format("{} worker init failed: {}", backend, reason(err)));
  return std::make_unique<WorkerEngine>(plugin, engine);
}

#define WT_WORKER_CALL(slot, ...)                                                      \
  do {                                                                                 \
    const auto* w = plugin_->api().worker;                                             \
    wt_status s = w->slot(engine_ __VA_OPT__(, ) __VA_ARGS__);                         \
    if (s != WT_OK)                                                                    \
      throw Error(s, fmt::format("{} worker {} failed: {}", plugin_->backend(), #slot, \
                                 reason(w->last_error(engine_))));                     \
  } while (0)

void WorkerEngine::start() {
  WT_WORKER_CALL(start);
}
void WorkerEngine::finish() {
  WT_WORKER_CALL(finish);
}
void WorkerEngine::abort() {
  WT_WORKER_CALL(abort);
}

void WorkerEngine::receive(std::string_view update_info_json, const Loader& load) {
  std::string json(update_info_json);
  auto tramp = [](void* ctx, const wt_tensor* tensors, size_t count, char* err, size_t cap) {
    return host_guard(err, cap, [&] {
      (*static_cast<const Loader*>(ctx))(std::span<const wt_tensor>(tensors, count));
    });
  };
  WT_WORKER_CALL(receive, json.c_str(), tramp, const_cast<Loader*>(&load));
}

#undef WT_WORKER_CALL

}  // namespace wt
