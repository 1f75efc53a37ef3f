// The adapter that lets a version-1 plugin binary (wt 0.1.0) serve the current ABI, untouched.
// What it translates, slot by slot (docs/abi-policy.md has the whole list):
//   init_info.parse_json  v1 has no field out-parameter: the field is taken from a
//                         "field 'x'" in the message when there is one, else left empty
//   init_info.to_json     v1 said WT_ERR_INVALID_ARGUMENT for a short buffer: becomes
//                         WT_ERR_BUFFER_TOO_SMALL
//   trainer.create        args struct -> positional; the weight source is re-presented with v1's
//                         fixed-size wt_tensor / wt_param_meta (no struct_size)
//   trainer.send_weights  growable patches -> v1 patches; the stream is not passed (v1 plugins
//                         synchronise the device themselves); after a failure on the sender
//                         rank the host ends the inference side's update (v1 had no way to)
//   worker.create         args struct -> host, json, wt_worker_options_v1; receiver-side backend
//                         options are refused (v1 cannot take them)
//   worker.receive        the loader -> a v1 load callback whose tensors are re-presented as
//                         growable ones; a v1 plugin never asks for destinations
#include "plugin_table.hpp"

#include "internal.hpp"

#include <wt/wt_plugin_v1.h>

#include <fmt/format.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace wt::detail {
namespace {

// The v1 view of a v2 weight source, kept as long as the trainer engine.
struct SourceV1 {
  const wt_weight_source* v2 = nullptr;
  wt_weight_source_v1 c{};
  std::vector<wt_param_meta_v1> meta;

  explicit SourceV1(const wt_weight_source* source) : v2(source) {
    c.struct_size = sizeof c;
    c.abi_version = 1;
    c.ctx = this;
    c.metadata = [](void* ctx, const wt_param_meta_v1** params, size_t* count, char* err,
                    size_t cap) -> wt_status {
      auto* self = static_cast<SourceV1*>(ctx);
      const wt_param_meta* p = nullptr;
      size_t n = 0;
      wt_status s = self->v2->metadata(self->v2->ctx, &p, &n, err, cap);
      if (s != WT_OK) return s;
      return host_guard(err, cap, [&] {
        self->meta.resize(n);
        for (size_t i = 0; i < n; ++i) {
          const auto* m = WT_ELEMENT(wt_param_meta, p, i);
          self->meta[i] = {m->name, m->dtype, m->ndim, m->shape};
        }
        *params = self->meta.data();
        *count = n;
      });
    };
    c.begin = [](void* ctx, char* err, size_t cap) {
      auto* self = static_cast<SourceV1*>(ctx);
      return self->v2->begin(self->v2->ctx, err, cap);
    };
    c.next = [](void* ctx, wt_tensor_v1* out, int32_t* done, char* err, size_t cap) {
      auto* self = static_cast<SourceV1*>(ctx);
      wt_tensor t{};
      t.struct_size = sizeof t;
      t.abi_version = WT_ABI_VERSION;
      wt_status s = self->v2->next(self->v2->ctx, &t, done, err, cap);
      if (s == WT_OK && *done == 0) *out = wt_tensor_v1{t.name, t.tensor};
      return s;
    };
    c.end = [](void* ctx) {
      auto* self = static_cast<SourceV1*>(ctx);
      self->v2->end(self->v2->ctx);
    };
  }
};

// What the host holds as the wt_trainer* of a v1 plugin.
struct TrainerV1 {
  wt_trainer* inner = nullptr;
  wt_client_v1 client{};
  std::unique_ptr<SourceV1> source;
  const wt_client* host_client = nullptr;  // the host's own (version 2) client
  bool sender = false;
};

TrainerV1* unwrap(wt_trainer* e) {
  return reinterpret_cast<TrainerV1*>(e);
}
const TrainerV1* unwrap(const wt_trainer* e) {
  return reinterpret_cast<const TrainerV1*>(e);
}

bool has_backend_options(const char* json) {
  if (json == nullptr) return false;
  std::string s;
  for (const char* p = json; *p; ++p)
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') s += *p;
  return !s.empty() && s != "{}" && s != "null";
}

class TableV1 final : public PluginTable {
 public:
  explicit TableV1(const wt_plugin_api_v1* api) : api_(api) {}

  wt_status parse_init_info(const wt_host_api* host, const char* json, wt_init_info** out,
                            char* err, size_t err_cap, char* field,
                            size_t field_cap) const override {
    wt_status s = api_->init_info->parse_json(host, json, out, err, err_cap);
    if (field != nullptr && field_cap > 0)
      sdk::write_message(field, field_cap,
                         s == WT_OK ? "" : sdk::field_named_in(err != nullptr ? err : ""));
    return s;
  }
  wt_status init_info_to_json(const wt_init_info* info, char* buf, size_t cap,
                              size_t* needed) const override {
    size_t n = 0;
    wt_status s = api_->init_info->to_json(info, buf, cap, &n);
    if (needed != nullptr) *needed = n;
    if (s == WT_ERR_INVALID_ARGUMENT && n > cap) return WT_ERR_BUFFER_TOO_SMALL;
    return s;
  }
  int64_t rank(const wt_init_info* info) const override { return api_->init_info->rank(info); }
  bool is_sender(const wt_init_info* info) const override {
    return api_->init_info->is_sender(info) != 0;
  }
  void destroy_init_info(wt_init_info* info) const override { api_->init_info->destroy(info); }

  wt_status create_trainer(const wt_trainer_create_args& args, wt_trainer** out, char* err,
                           size_t err_cap) const override {
    auto w = std::make_unique<TrainerV1>();
    if (args.client != nullptr) {
      // The first six fields are v1's client; a v1 plugin never sees end_weight_update.
      std::memcpy(&w->client, args.client, sizeof w->client);
      w->client.struct_size = sizeof w->client;
      w->client.abi_version = 1;
    }
    if (args.source != nullptr) w->source = std::make_unique<SourceV1>(args.source);
    w->host_client = args.client;
    w->sender = args.info != nullptr && api_->init_info->is_sender(args.info) != 0;
    wt_status s = api_->trainer->create(
        args.host, args.info, args.client != nullptr ? &w->client : nullptr,
        w->source ? &w->source->c : nullptr, args.group, &w->inner, err, err_cap);
    if (s != WT_OK) return s;
    if (w->inner == nullptr) return WT_ERR_INTERNAL;
    *out = reinterpret_cast<wt_trainer*>(w.release());
    return WT_OK;
  }
  wt_status send_weights(wt_trainer* e, const wt_send_args& args) const override {
    std::vector<wt_sparse_patch_v1> patches(args.num_patches);
    for (size_t i = 0; i < args.num_patches; ++i) {
      const auto* p = WT_ELEMENT(wt_sparse_patch, args.patches, i);
      patches[i] = {p->name, p->indices, p->values, p->full_ndim, p->full_shape};
    }
    wt_send_args_v1 a{};
    a.struct_size = sizeof a;
    a.abi_version = 1;
    a.weight_version = args.weight_version;
    a.patches = patches.empty() ? nullptr : patches.data();
    a.num_patches = patches.size();
    TrainerV1* t = unwrap(e);
    wt_status s = api_->trainer->send_weights(t->inner, &a);
    // Version 1 had no way to end a failed round on the inference side; the host does it for the
    // plugin's sender, so the next start is accepted there (ending when none is active is fine).
    if (s != WT_OK && t->sender && t->host_client != nullptr &&
        t->host_client->struct_size >= offsetof(wt_client, end_weight_update) + sizeof(void*) &&
        t->host_client->end_weight_update != nullptr) {
      char err[256] = {0};
      const char* why = api_->trainer->last_error(t->inner);
      t->host_client->end_weight_update(t->host_client->ctx, why, err, sizeof err);
    }
    return s;
  }
  wt_status abort_trainer(wt_trainer* e) const override {
    return api_->trainer->abort(unwrap(e)->inner);
  }
  const char* trainer_last_error(const wt_trainer* e) const override {
    return api_->trainer->last_error(unwrap(e)->inner);
  }
  void destroy_trainer(wt_trainer* e) const override {
    if (e == nullptr) return;
    api_->trainer->destroy(unwrap(e)->inner);
    delete unwrap(e);
  }

  wt_status create_worker(const wt_worker_create_args& args, wt_worker** out, char* err,
                          size_t err_cap) const override {
    if (has_backend_options(args.backend_options_json)) {
      sdk::write_message(err, err_cap,
                         fmt::format("backend options {} were given, but this plugin speaks wt ABI "
                                     "version 1, which cannot take receiver-side backend options; "
                                     "rebuild it against ABI version {} or drop the options",
                                     args.backend_options_json, WT_ABI_VERSION));
      return WT_ERR_INCOMPATIBLE;
    }
    wt_worker_options_v1 o{};
    o.struct_size = sizeof o;
    o.abi_version = 1;
    o.device = args.device;
    return api_->worker->create(args.host, args.init_info_json, &o, out, err, err_cap);
  }
  wt_status start(wt_worker* e) const override { return api_->worker->start(e); }
  wt_status receive(wt_worker* e, const char* json, const wt_loader& loader) const override {
    auto load = [](void* ctx, const wt_tensor_v1* tensors, size_t count, char* err,
                   size_t cap) -> wt_status {
      const auto* l = static_cast<const wt_loader*>(ctx);
      std::vector<wt_tensor> v2;
      wt_status s = host_guard(err, cap, [&] {
        v2.resize(count);
        for (size_t i = 0; i < count; ++i) {
          v2[i].struct_size = sizeof(wt_tensor);
          v2[i].abi_version = WT_ABI_VERSION;
          v2[i].name = tensors[i].name;
          v2[i].tensor = tensors[i].tensor;
        }
      });
      if (s != WT_OK) return s;
      return l->load(l->ctx, v2.data(), count, err, cap);
    };
    return api_->worker->receive(e, json, load, const_cast<wt_loader*>(&loader));
  }
  wt_status finish(wt_worker* e) const override { return api_->worker->finish(e); }
  wt_status abort_worker(wt_worker* e) const override { return api_->worker->abort(e); }
  const char* worker_last_error(const wt_worker* e) const override {
    return api_->worker->last_error(e);
  }
  void destroy_worker(wt_worker* e) const override { api_->worker->destroy(e); }

 private:
  const wt_plugin_api_v1* api_;
};

}  // namespace

std::unique_ptr<PluginTable> table_v1(const wt_plugin_api_v1* api) {
  return std::make_unique<TableV1>(api);
}

}  // namespace wt::detail

// One validation (load_checks.cpp) serves both versions: the tables differ only in the
// arguments of their slots, never in layout.
#define WT_SAME_LAYOUT(v1, v2, field) \
  static_assert(offsetof(v1, field) == offsetof(v2, field), #v1 "." #field)
WT_SAME_LAYOUT(wt_plugin_api_v1, wt_plugin_api, worker);
static_assert(sizeof(wt_plugin_api_v1) == sizeof(wt_plugin_api));
static_assert(sizeof(wt_init_info_vtable_v1) == sizeof(wt_init_info_vtable));
WT_SAME_LAYOUT(wt_init_info_vtable_v1, wt_init_info_vtable, destroy);
static_assert(sizeof(wt_trainer_vtable_v1) == sizeof(wt_trainer_vtable));
WT_SAME_LAYOUT(wt_trainer_vtable_v1, wt_trainer_vtable, destroy);
static_assert(sizeof(wt_worker_vtable_v1) == sizeof(wt_worker_vtable));
WT_SAME_LAYOUT(wt_worker_vtable_v1, wt_worker_vtable, destroy);
// v1's client is the first part of v2's.
WT_SAME_LAYOUT(wt_client_v1, wt_client, finish_weight_update);
#undef WT_SAME_LAYOUT
