// How the SDK serves ABI version 1 as well (PluginDefinition::oldest_abi = 1), so one plugin binary
// also loads into a wt 0.1.0 host: version-1 tables whose slots present the v1 host's objects as
// version-2 ones and call the same PluginTables. Included by <wt/sdk/plugin.hpp>.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/wt_plugin.h>
#include <wt/wt_plugin_v1.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

namespace wt::sdk::v1 {

// A version-2 weight source over a version-1 host's.
struct Source {
  const wt_weight_source_v1* v1;
  wt_weight_source c{};
  std::vector<wt_param_meta> meta;

  explicit Source(const wt_weight_source_v1* s) : v1(s) {
    c.struct_size = sizeof c;
    c.abi_version = WT_ABI_VERSION;
    c.ctx = this;
    c.metadata = [](void* ctx, const wt_param_meta** params, size_t* count, char* err,
                    size_t cap) -> wt_status {
      auto* self = static_cast<Source*>(ctx);
      const wt_param_meta_v1* p = nullptr;
      size_t n = 0;
      wt_status s = self->v1->metadata(self->v1->ctx, &p, &n, err, cap);
      if (s != WT_OK) return s;
      try {
        self->meta.resize(n);
      } catch (const std::bad_alloc&) {
        return WT_ERR_SYSTEM;
      }
      for (size_t i = 0; i < n; ++i)
        self->meta[i] = {sizeof(wt_param_meta),
                         WT_ABI_VERSION,
                         p[i].name,
                         p[i].dtype,
                         p[i].ndim,
                         p[i].shape,
                         0,
                         0,
                         0,
                         0};
      *params = self->meta.data();
      *count = n;
      return WT_OK;
    };
    c.begin = [](void* ctx, char* err, size_t cap) {
      auto* self = static_cast<Source*>(ctx);
      return self->v1->begin(self->v1->ctx, err, cap);
    };
    c.next = [](void* ctx, wt_tensor* out, int32_t* done, char* err, size_t cap) {
      auto* self = static_cast<Source*>(ctx);
      wt_tensor_v1 t{};
      wt_status s = self->v1->next(self->v1->ctx, &t, done, err, cap);
      if (s == WT_OK && *done == 0) {
        out->name = t.name;
        out->tensor = t.tensor;
      }
      return s;
    };
    c.end = [](void* ctx) {
      auto* self = static_cast<Source*>(ctx);
      self->v1->end(self->v1->ctx);
    };
  }
};

// What a trainer made for a version-1 host keeps: its client (v1's is the first part of v2's)
// and its source, as version-2 objects.
struct TrainerState {
  wt_client client{};
  std::unique_ptr<Source> source;
  TrainerState(const wt_client_v1* c, const wt_weight_source_v1* s) {
    if (c != nullptr) {
      std::memcpy(&client, c, sizeof(wt_client_v1));
      client.struct_size = sizeof(wt_client_v1);  // no end_weight_update: ClientRef falls back
    }
    if (s != nullptr) source = std::make_unique<Source>(s);
  }
};

// A version-2 loader over a version-1 load callback: dense loads only.
struct Loader {
  wt_load_fn_v1 fn;
  void* fn_ctx;
  wt_loader c{};
  Loader(wt_load_fn_v1 f, void* ctx) : fn(f), fn_ctx(ctx) {
    c.struct_size = sizeof c;
    c.abi_version = WT_ABI_VERSION;
    c.ctx = this;
    c.load = [](void* ctx, const wt_tensor* tensors, size_t count, char* err,
                size_t cap) -> wt_status {
      auto* self = static_cast<Loader*>(ctx);
      std::vector<wt_tensor_v1> v;
      try {
        v.resize(count);
      } catch (const std::bad_alloc&) {
        return WT_ERR_SYSTEM;
      }
      for (size_t i = 0; i < count; ++i) {
        const auto* t = WT_ELEMENT(wt_tensor, tensors, i);
        v[i] = {t->name, t->tensor};
      }
      return self->fn(self->fn_ctx, v.data(), count, err, cap);
    };
  }
};

template <typename Tables>
struct TablesV1 {
  static wt_status parse(const wt_host_api* host, const char* json, wt_init_info** out, char* err,
                         size_t cap) {
    return Tables::parse(host, json, out, err, cap, nullptr, 0);
  }
  static wt_status to_json(const wt_init_info* info, char* buf, size_t cap, size_t* needed) {
    wt_status s = Tables::to_json(info, buf, cap, needed);
    return s == WT_ERR_BUFFER_TOO_SMALL ? WT_ERR_INVALID_ARGUMENT : s;  // version 1's code
  }
  static wt_status trainer_create(const wt_host_api* host, const wt_init_info* info,
                                  const wt_client_v1* client, const wt_weight_source_v1* source,
                                  const wt_trainer_group* group, wt_trainer** out, char* err,
                                  size_t cap) {
    std::shared_ptr<TrainerState> state;
    try {
      state = std::make_shared<TrainerState>(client, source);
    } catch (const std::bad_alloc&) {
      return WT_ERR_SYSTEM;
    }
    wt_trainer_create_args a{};
    a.struct_size = sizeof a;
    a.abi_version = WT_ABI_VERSION;
    a.host = host;
    a.info = info;
    a.client = client != nullptr ? &state->client : nullptr;
    a.source = state->source ? &state->source->c : nullptr;
    a.group = group;
    wt_status s = Tables::trainer_create(&a, out, err, cap);
    if (s == WT_OK) (*out)->keep = std::move(state);
    return s;
  }
  static wt_status send_weights(wt_trainer* t, const wt_send_args_v1* args) {
    wt_send_args a{};
    a.struct_size = sizeof a;
    a.abi_version = WT_ABI_VERSION;
    std::vector<wt_sparse_patch> patches;
    if (args != nullptr) {
      a.weight_version = args->weight_version;
      try {
        for (size_t i = 0; i < args->num_patches; ++i) {
          const auto& p = args->patches[i];
          patches.push_back({sizeof(wt_sparse_patch), WT_ABI_VERSION, p.name, p.indices, p.values,
                             p.full_ndim, p.full_shape});
        }
      } catch (const std::bad_alloc&) {
        return WT_ERR_SYSTEM;
      }
      a.patches = patches.empty() ? nullptr : patches.data();
      a.num_patches = patches.size();
    }
    return Tables::send_weights(t, &a);
  }
  static wt_status worker_create(const wt_host_api* host, const char* json,
                                 const wt_worker_options_v1* options, wt_worker** out, char* err,
                                 size_t cap) {
    wt_worker_create_args a{};
    a.struct_size = sizeof a;
    a.abi_version = WT_ABI_VERSION;
    a.host = host;
    a.init_info_json = json;
    a.device = {kDLCPU, 0};
    if (options != nullptr &&
        options->struct_size >= offsetof(wt_worker_options_v1, device) + sizeof(DLDevice))
      a.device = options->device;
    a.backend_options_json = "{}";
    return Tables::worker_create(&a, out, err, cap);
  }
  static wt_status worker_receive(wt_worker* w, const char* json, wt_load_fn_v1 load,
                                  void* load_ctx) {
    if (load == nullptr) return Tables::worker_receive(w, json, nullptr);
    Loader l(load, load_ctx);
    return Tables::worker_receive(w, json, &l.c);
  }

  static constexpr wt_init_info_vtable_v1 kInitInfo{
      sizeof(wt_init_info_vtable_v1), 1, &parse, &to_json, &Tables::rank, &Tables::is_sender,
      &Tables::destroy_info};
  static constexpr wt_trainer_vtable_v1 kTrainer{sizeof(wt_trainer_vtable_v1),
                                                 1,
                                                 &trainer_create,
                                                 &send_weights,
                                                 &Tables::trainer_abort,
                                                 &Tables::trainer_last_error,
                                                 &Tables::trainer_destroy};
  static constexpr wt_worker_vtable_v1 kWorker{sizeof(wt_worker_vtable_v1),
                                               1,
                                               &worker_create,
                                               &Tables::worker_start,
                                               &worker_receive,
                                               &Tables::worker_finish,
                                               &Tables::worker_abort,
                                               &Tables::worker_last_error,
                                               &Tables::worker_destroy};
};

}  // namespace wt::sdk::v1
