// Scaffolding for writing a wt backend in C++. Implement three classes, describe them in a
// PluginDefinition, and WT_DEFINE_PLUGIN generates the C ABI (wt_plugin.h) around them:
// negotiation, vtables, exception guards and last_error storage.
//
//   static const wt::sdk::PluginDefinition kDef{"mybackend", "1.0.0", caps,
//                                               &parse, &make_trainer, &make_worker};
//   WT_DEFINE_PLUGIN(kDef)
//
// Throw wt::sdk::Error (or call wt::sdk::fail) for every error; the guard turns it into the
// status code and the message the host reads.
#pragma once

#include <wt/wt_plugin.h>
#include <wt/sdk/errors.hpp>
#include <wt/sdk/host_log.hpp>
#include <wt/sdk/host_objects.hpp>
#include <wt/sdk/json_fields.hpp>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace wt::sdk {

class InitInfoBase {
 public:
  virtual ~InitInfoBase() = default;
  // Every field with defaults filled in, without "backend".
  virtual nlohmann::json to_json() const = 0;
  virtual int64_t rank() const = 0;
  virtual bool is_sender() const { return rank() == 0; }
};

class TrainerBase {
 public:
  virtual ~TrainerBase() = default;
  virtual void send_weights(const wt_send_args& args) = 0;
  // Called from another thread; must make a blocked send_weights return WT_ERR_ABORTED.
  virtual void abort() = 0;
};

class WorkerBase {
 public:
  virtual ~WorkerBase() = default;
  virtual void start() = 0;
  virtual void receive(const nlohmann::json& update_info, wt_load_fn load, void* load_ctx) = 0;
  virtual void finish() = 0;
  virtual void abort() = 0;
};

struct PluginDefinition {
  const char* backend;
  const char* version;
  uint64_t capabilities;
  // `fields` is the whole init info object; FieldReader it strictly.
  std::unique_ptr<InitInfoBase> (*parse_init_info)(const nlohmann::json& fields);
  std::unique_ptr<TrainerBase> (*make_trainer)(const wt_host_api* host, const InitInfoBase& info,
                                               ClientRef client, SourceRef source, GroupRef group);
  std::unique_ptr<WorkerBase> (*make_worker)(const wt_host_api* host,
                                             const nlohmann::json& init_info,
                                             const wt_worker_options& options);
};

}  // namespace wt::sdk

// The opaque ABI objects, as this SDK implements them.
struct wt_init_info {
  std::unique_ptr<wt::sdk::InitInfoBase> impl;
};
struct wt_trainer {
  std::unique_ptr<wt::sdk::TrainerBase> impl;
  std::string last_error;
};
struct wt_worker {
  std::unique_ptr<wt::sdk::WorkerBase> impl;
  std::string last_error;
};

namespace wt::sdk {

template <const PluginDefinition& D>
struct PluginTables {
  static wt_status parse(const wt_host_api*, const char* json, wt_init_info** out, char* err,
                         size_t cap) {
    return guard_into(err, cap, [&] {
      std::string what = fmt::format("init_info for backend '{}'", D.backend);
      nlohmann::json j = parse_json_text(json, what);
      if (j.is_object() && j.contains("backend")) {
        if (!j["backend"].is_string() || j["backend"].template get<std::string>() != D.backend)
          fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: field 'backend' is {}, expected \"{}\"", what,
               j["backend"].dump(), D.backend);
        j.erase("backend");
      }
      auto info = std::make_unique<wt_init_info>();
      info->impl = D.parse_init_info(j);
      *out = info.release();
    });
  }
  static wt_status to_json(const wt_init_info* info, char* buf, size_t cap, size_t* needed) {
    std::string ignored;
    std::string text;
    wt_status s = guard(ignored, [&] { text = info->impl->to_json().dump(); });
    if (s != WT_OK) return s;
    if (needed) *needed = text.size() + 1;
    if (buf == nullptr || cap < text.size() + 1) return WT_ERR_INVALID_ARGUMENT;
    std::memcpy(buf, text.c_str(), text.size() + 1);
    return WT_OK;
  }
  static int64_t rank(const wt_init_info* info) { return info->impl->rank(); }
  static int32_t is_sender(const wt_init_info* info) { return info->impl->is_sender() ? 1 : 0; }
  static void destroy_info(wt_init_info* info) { delete info; }

  static wt_status trainer_create(const wt_host_api* host, const wt_init_info* info,
                                  const wt_client* client, const wt_weight_source* source,
                                  const wt_trainer_group* group, wt_trainer** out, char* err,
                                  size_t cap) {
    return guard_into(err, cap, [&] {
      if (info == nullptr) fail(WT_ERR_INVALID_ARGUMENT, "init_info is NULL");
      auto t = std::make_unique<wt_trainer>();
      t->impl =
          D.make_trainer(host, *info->impl, ClientRef(client), SourceRef(source), GroupRef(group));
      *out = t.release();
    });
  }
  static wt_status send_weights(wt_trainer* t, const wt_send_args* args) {
    wt_send_args none{};
    none.struct_size = sizeof none;
    none.abi_version = WT_ABI_VERSION;
    return guard(t->last_error, [&] { t->impl->send_weights(args ? *args : none); });
  }
  static wt_status trainer_abort(wt_trainer* t) {
    std::string ignored;
    return guard(ignored, [&] { t->impl->abort(); });
  }
  static const char* trainer_last_error(const wt_trainer* t) { return t->last_error.c_str(); }
  static void trainer_destroy(wt_trainer* t) { delete t; }

  static wt_status worker_create(const wt_host_api* host, const char* json,
                                 const wt_worker_options* options, wt_worker** out, char* err,
                                 size_t cap) {
    return guard_into(err, cap, [&] {
      wt_worker_options opts{};
      opts.device = {kDLCPU, 0};
      if (options != nullptr && has_slot(options, &wt_worker_options::device))
        opts.device = options->device;
      auto init = parse_json_text(json, fmt::format("init_info for backend '{}'", D.backend));
      auto w = std::make_unique<wt_worker>();
      w->impl = D.make_worker(host, init, opts);
      *out = w.release();
    });
  }
  static wt_status worker_start(wt_worker* w) {
    return guard(w->last_error, [&] { w->impl->start(); });
  }
  static wt_status worker_receive(wt_worker* w, const char* json, wt_load_fn load, void* ctx) {
    return guard(w->last_error, [&] {
      if (load == nullptr) fail(WT_ERR_INVALID_ARGUMENT, "receive needs a load callback");
      w->impl->receive(parse_json_text(json, "update_info"), load, ctx);
    });
  }
  static wt_status worker_finish(wt_worker* w) {
    return guard(w->last_error, [&] { w->impl->finish(); });
  }
  static wt_status worker_abort(wt_worker* w) {
    std::string ignored;
    return guard(ignored, [&] { w->impl->abort(); });
  }
  static const char* worker_last_error(const wt_worker* w) { return w->last_error.c_str(); }
  static void worker_destroy(wt_worker* w) { delete w; }

  static constexpr wt_init_info_vtable kInitInfo{sizeof(wt_init_info_vtable),
                                                 WT_ABI_VERSION,
                                                 &parse,
                                                 &to_json,
                                                 &rank,
                                                 &is_sender,
                                                 &destroy_info};
  static constexpr wt_trainer_vtable kTrainer{
      sizeof(wt_trainer_vtable), WT_ABI_VERSION,  &trainer_create, &send_weights, &trainer_abort,
      &trainer_last_error,       &trainer_destroy};
  static constexpr wt_worker_vtable kWorker{
      sizeof(wt_worker_vtable), WT_ABI_VERSION, &worker_create,     &worker_start,  &worker_receive,
      &worker_finish,           &worker_abort,  &worker_last_error, &worker_destroy};
  static constexpr wt_plugin_api kApi{sizeof(wt_plugin_api),
                                      WT_ABI_VERSION,
                                      D.backend,
                                      D.version,
                                      D.capabilities,
                                      &kInitInfo,
                                      D.make_trainer ? &kTrainer : nullptr,
                                      D.make_worker ? &kWorker : nullptr};

  static wt_status negotiate(uint32_t host_abi, uint32_t* plugin_abi, const wt_plugin_api** api) {
    if (plugin_abi != nullptr) *plugin_abi = WT_ABI_VERSION;
    if (host_abi < WT_ABI_VERSION || api == nullptr) return WT_ERR_INCOMPATIBLE;
    *api = &kApi;
    return WT_OK;
  }
};

}  // namespace wt::sdk

#define WT_DEFINE_PLUGIN(definition)                                                           \
  extern "C" WT_PLUGIN_EXPORT wt_status wt_plugin_get(uint32_t host_abi, uint32_t* plugin_abi, \
                                                      const wt_plugin_api** api) {             \
    return ::wt::sdk::PluginTables<definition>::negotiate(host_abi, plugin_abi, api);          \
  }
