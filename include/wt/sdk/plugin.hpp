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

#include <wt/dlpack_ops.hpp>
#include <wt/requires_cxx20.hpp>

#include <wt/wt_plugin.h>
#include <wt/sdk/errors.hpp>
#include <wt/sdk/host_log.hpp>
#include <wt/sdk/host_objects.hpp>
#include <wt/sdk/json_fields.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace wt::sdk {

class InitInfoBase {
 public:
  virtual ~InitInfoBase() = default;
  // Every field with defaults filled in, without "backend".
  virtual nlohmann::json to_json() const = 0;
  virtual int64_t rank() const = 0;
  virtual bool is_sender() const { return rank() == 0; }
};

// One round as the SDK hands it to a trainer: patches already stepped by their struct_size.
struct SendArgs {
  const char* weight_version = nullptr;  // may be null
  std::vector<wt_sparse_patch> patches;  // delta backends only
  void* stream = nullptr;                // cudaStream_t that produced the tensors; null: default
};

// What a trainer engine is made with.
struct TrainerContext {
  const wt_host_api* host = nullptr;
  ClientRef client;
  SourceRef source;
  GroupRef group;
};

// What a worker engine is made with.
struct WorkerContext {
  const wt_host_api* host = nullptr;
  DLDevice device{kDLCPU, 0};
  void* stream = nullptr;  // cudaStream_t the model uses; null: the legacy default stream
  nlohmann::json backend_options = nlohmann::json::object();  // receiver-side; FieldReader it
  // The model this worker holds, as it keeps each parameter, when the host knows it (wt 0.3 and
  // later, once a model is loaded); empty: not known.
  std::vector<ParamMeta> held;
};

class TrainerBase {
 public:
  virtual ~TrainerBase() = default;
  virtual void send_weights(const SendArgs& args) = 0;
  // Called from another thread; must make a blocked send_weights return WT_ERR_ABORTED.
  virtual void abort() = 0;
};

class WorkerBase {
 public:
  virtual ~WorkerBase() = default;
  virtual void start() = 0;
  virtual void receive(const nlohmann::json& update_info, const LoaderRef& loader) = 0;
  // The update info as the host passed it (NUL-terminated JSON text), before it is parsed. The
  // default parses it (bounded depth) and calls receive(). An engine whose update info is the same
  // text round after round (a full resync names the same tensors each time) may override it to
  // reuse what it read from that text last time instead of parsing it again.
  virtual void receive_text(const char* update_info, const LoaderRef& loader) {
    receive(parse_json_text(update_info, "update_info"), loader);
  }
  virtual void finish() = 0;
  virtual void abort() = 0;
};

struct PluginDefinition {
  const char* backend;
  const char* version;
  uint64_t capabilities;
  // `fields` is the whole init info object; FieldReader it strictly.
  std::unique_ptr<InitInfoBase> (*parse_init_info)(const nlohmann::json& fields);
  std::unique_ptr<TrainerBase> (*make_trainer)(const TrainerContext& context,
                                               const InitInfoBase& info);
  std::unique_ptr<WorkerBase> (*make_worker)(const WorkerContext& context,
                                             const nlohmann::json& init_info);
  // The oldest ABI version the plugin also serves: 1 lets the same binary load into a wt 0.1.0
  // host (version-1 tables over the same classes; no destinations, patches or streams there).
  uint32_t oldest_abi = WT_ABI_VERSION;
};

// The definition of a plugin whose classes have the SDK's shapes, without writing the factories:
//   Info:    static std::unique_ptr<InitInfoBase> parse(const nlohmann::json& fields)
//   Trainer: Trainer(const TrainerContext&, const Info&), derived from TrainerBase
//   Worker:  Worker(const WorkerContext&, const nlohmann::json& init_info), from WorkerBase
//
//   constexpr auto kDefinition = wt::sdk::define_plugin<MyInfo, MyTrainer, MyWorker>(
//       WT_PLUGIN_BACKEND, WT_PLUGIN_VERSION, WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY);
//   WT_DEFINE_PLUGIN(kDefinition)
template <typename Info, typename Trainer, typename Worker>
constexpr PluginDefinition define_plugin(const char* backend, const char* version,
                                         uint64_t capabilities,
                                         uint32_t oldest_abi = WT_ABI_VERSION) {
  return {
      backend,
      version,
      capabilities,
      &Info::parse,
      [](const TrainerContext& context, const InitInfoBase& info) -> std::unique_ptr<TrainerBase> {
        return std::make_unique<Trainer>(context, static_cast<const Info&>(info));
      },
      [](const WorkerContext& context, const nlohmann::json& init_info)
          -> std::unique_ptr<WorkerBase> { return std::make_unique<Worker>(context, init_info); },
      oldest_abi};
}

}  // namespace wt::sdk

// The opaque ABI objects, as this SDK implements them.
struct wt_init_info {
  std::unique_ptr<wt::sdk::InitInfoBase> impl;
};
struct wt_trainer {
  // What serving an older ABI needs for the engine's lifetime (declared first: destroyed after
  // impl, whose destructor may still use the client it holds).
  std::shared_ptr<void> keep;
  std::unique_ptr<wt::sdk::TrainerBase> impl;
  std::string last_error;
};
struct wt_worker {
  std::unique_ptr<wt::sdk::WorkerBase> impl;
  std::string last_error;
};

namespace wt::sdk {

// Whether a definition gives a factory (a function parameter, so the compiler does not warn that
// a named function's address is never null).
template <typename F>
constexpr bool present(F f) {
  return f != nullptr;
}

template <const PluginDefinition& D>
struct PluginTables {
  static wt_status parse(const wt_host_api*, const char* json, wt_init_info** out, char* err,
                         size_t cap, char* field, size_t field_cap) {
    std::string message, which;
    wt_status s = guard(message, [&] {
      try {
        std::string what = fmt::format("init_info for backend '{}'", D.backend);
        nlohmann::json j = parse_json_text(json, what);
        if (j.is_object() && j.contains("backend")) {
          if (!j["backend"].is_string() || j["backend"].template get<std::string>() != D.backend)
            fail_field("backend", WT_ERR_INVALID_ARGUMENT,
                       "invalid {}: field 'backend' is {}, expected \"{}\"", what,
                       j["backend"].dump(), D.backend);
          j.erase("backend");
        }
        auto info = std::make_unique<wt_init_info>();
        info->impl = D.parse_init_info(j);
        *out = info.release();
      } catch (const Error& e) {
        which = e.field().empty() ? field_named_in(e.what()) : e.field();
        throw;
      }
    });
    if (s != WT_OK) write_message(err, cap, message);
    write_message(field, field_cap, s == WT_OK ? std::string() : which);
    return s;
  }
  static wt_status to_json(const wt_init_info* info, char* buf, size_t cap, size_t* needed) {
    std::string ignored;
    std::string text;
    wt_status s = guard(ignored, [&] { text = info->impl->to_json().dump(); });
    if (s != WT_OK) return s;
    if (needed) *needed = text.size() + 1;
    if (buf == nullptr || cap < text.size() + 1) return WT_ERR_BUFFER_TOO_SMALL;
    std::memcpy(buf, text.c_str(), text.size() + 1);
    return WT_OK;
  }
  // No status to return here: an exception (a plugin bug) becomes rank -1, not a sender.
  static int64_t rank(const wt_init_info* info) noexcept {
    try {
      return info->impl->rank();
    } catch (...) {
      return -1;
    }
  }
  static int32_t is_sender(const wt_init_info* info) noexcept {
    try {
      return info->impl->is_sender() ? 1 : 0;
    } catch (...) {
      return 0;
    }
  }
  static void destroy_info(wt_init_info* info) { delete info; }

  static wt_status trainer_create(const wt_trainer_create_args* args, wt_trainer** out, char* err,
                                  size_t cap) {
    return guard_into(err, cap, [&] {
      if (!covers(args, &wt_trainer_create_args::group))
        fail(WT_ERR_INVALID_ARGUMENT, "trainer create got no (or a too small) args struct");
      if (args->info == nullptr) fail(WT_ERR_INVALID_ARGUMENT, "init_info is NULL");
      TrainerContext c{args->host, ClientRef(args->client), SourceRef(args->source),
                       GroupRef(args->group)};
      auto t = std::make_unique<wt_trainer>();
      t->impl = D.make_trainer(c, *args->info->impl);
      *out = t.release();
    });
  }
  static wt_status send_weights(wt_trainer* t, const wt_send_args* args) {
    return guard(t->last_error, [&] {
      SendArgs a;
      if (args != nullptr) {
        if (has_slot(args, &wt_send_args::weight_version)) a.weight_version = args->weight_version;
        if (has_slot(args, &wt_send_args::num_patches) && args->num_patches > 0) {
          if (args->patches == nullptr)
            fail(WT_ERR_INVALID_ARGUMENT, "num_patches > 0 but no patches");
          if (args->patches->struct_size < sizeof(wt_sparse_patch))
            fail(WT_ERR_INVALID_ARGUMENT,
                 "patches have struct_size {}, smaller than ABI 2's {} bytes",
                 args->patches->struct_size, sizeof(wt_sparse_patch));
          for (size_t i = 0; i < args->num_patches; ++i) {
            wt_sparse_patch p{};
            std::memcpy(&p, WT_ELEMENT(wt_sparse_patch, args->patches, i), sizeof p);
            p.struct_size = sizeof p;  // now this build's own layout
            a.patches.push_back(p);
          }
        }
        if (has_slot(args, &wt_send_args::stream)) a.stream = args->stream;
      }
      t->impl->send_weights(a);
    });
  }
  static wt_status trainer_abort(wt_trainer* t) {
    std::string ignored;  // abort never touches last_error (rule 7)
    return guard(ignored, [&] { t->impl->abort(); });
  }
  static const char* trainer_last_error(const wt_trainer* t) { return t->last_error.c_str(); }
  static void trainer_destroy(wt_trainer* t) { delete t; }

  static wt_status worker_create(const wt_worker_create_args* args, wt_worker** out, char* err,
                                 size_t cap) {
    return guard_into(err, cap, [&] {
      if (!covers(args, &wt_worker_create_args::device))
        fail(WT_ERR_INVALID_ARGUMENT, "worker create got no (or a too small) args struct");
      WorkerContext c;
      c.host = args->host;
      c.device = args->device;
      if (has_slot(args, &wt_worker_create_args::stream)) c.stream = args->stream;
      if (has_slot(args, &wt_worker_create_args::backend_options_json)) {
        c.backend_options =
            parse_json_text(args->backend_options_json,
                            fmt::format("backend options for backend '{}' (worker)", D.backend));
        if (c.backend_options.is_null()) c.backend_options = nlohmann::json::object();
      }
      if (has_slot(args, &wt_worker_create_args::held_count) && args->held_count > 0)
        c.held = read_param_metas(args->held, args->held_count, "the model the host says it holds");
      auto init = parse_json_text(args->init_info_json,
                                  fmt::format("init_info for backend '{}'", D.backend));
      auto w = std::make_unique<wt_worker>();
      w->impl = D.make_worker(c, init);
      *out = w.release();
    });
  }
  static wt_status worker_start(wt_worker* w) {
    return guard(w->last_error, [&] { w->impl->start(); });
  }
  static wt_status worker_receive(wt_worker* w, const char* json, const wt_loader* loader) {
    return guard(w->last_error, [&] {
      if (loader == nullptr) fail(WT_ERR_INVALID_ARGUMENT, "receive needs a loader");
      w->impl->receive_text(json, LoaderRef(loader));
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
  // The ABI table: the trainer and worker tables where the definition has their factories.
  static constexpr wt_plugin_api api_table() {
    return {sizeof(wt_plugin_api),
            WT_ABI_VERSION,
            D.backend,
            D.version,
            D.capabilities,
            &kInitInfo,
            present(D.make_trainer) ? &kTrainer : nullptr,
            present(D.make_worker) ? &kWorker : nullptr};
  }
  // It as a constant, for code that names it; negotiate() serves a copy made at its first call
  // (see there).
  static constexpr wt_plugin_api kApi = api_table();

  static wt_status negotiate(uint32_t host_abi, uint32_t* plugin_abi, const wt_plugin_api** api);
};

}  // namespace wt::sdk

#include <wt/sdk/plugin_v1.hpp>

namespace wt::sdk {

// The newest version both speak: this ABI, or version 1 when the definition serves it.
template <const PluginDefinition& D>
wt_status PluginTables<D>::negotiate(uint32_t host_abi, uint32_t* plugin_abi,
                                     const wt_plugin_api** api) {
  using V1 = v1::TablesV1<PluginTables<D>>;
  // Made at the first call, not as constants: whether a factory is there is a comparison of a
  // function's address, which GCC will not evaluate at compile time under UBSan.
  static const wt_plugin_api kServed = api_table();
  static const wt_plugin_api_v1 kApiV1{sizeof(wt_plugin_api_v1),
                                       1,
                                       D.backend,
                                       D.version,
                                       D.capabilities,
                                       &V1::kInitInfo,
                                       present(D.make_trainer) ? &V1::kTrainer : nullptr,
                                       present(D.make_worker) ? &V1::kWorker : nullptr};
  if (plugin_abi == nullptr || api == nullptr) return WT_ERR_INVALID_ARGUMENT;
  if (host_abi >= WT_ABI_VERSION) {
    *plugin_abi = WT_ABI_VERSION;
    *api = &kServed;
    return WT_OK;
  }
  if (host_abi >= 1 && D.oldest_abi <= 1) {
    *plugin_abi = 1;
    // The version-1 table has the same layout; a version-1 host reads it as its wt_plugin_api.
    *api = reinterpret_cast<const wt_plugin_api*>(&kApiV1);
    return WT_OK;
  }
  *plugin_abi = D.oldest_abi;
  return WT_ERR_INCOMPATIBLE;
}

}  // namespace wt::sdk

#define WT_DEFINE_PLUGIN(definition)                                                           \
  extern "C" WT_PLUGIN_EXPORT wt_status wt_plugin_get(uint32_t host_abi, uint32_t* plugin_abi, \
                                                      const wt_plugin_api** api) {             \
    return ::wt::sdk::PluginTables<definition>::negotiate(host_abi, plugin_abi, api);          \
  }
