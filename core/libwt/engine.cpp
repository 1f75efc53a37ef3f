#include <wt/engine.hpp>

#include <wt/dtype.hpp>
#include <wt/log.hpp>

#include "abi2_sizes.hpp"
#include "internal.hpp"
#include "plugin_table.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

namespace wt {
namespace {

constexpr std::size_t kErrCap = 4096;

std::string reason(const char* msg) {
  return msg != nullptr && *msg ? msg : "no reason given";
}

[[noreturn]] void refuse(const Plugin& p, const std::string& what) {
  throw Error(WT_ERR_INCOMPATIBLE,
              fmt::format("backend '{}' ({}) {}", p.backend(), p.path(), what));
}

// Whether a plugin may be handed memory of this device type (rule 9 of wt_plugin.h); the
// refusal names the capability and `kind` `name` (e.g. "tensor 'w'"). Called per tensor: the text
// is made only for a refusal.
void check_memory(const Plugin& p, DLDeviceType type, const char* kind,
                  const char* name = nullptr) {
  const auto what = [&] {
    return name == nullptr ? std::string(kind) : fmt::format("{} '{}'", kind, name);
  };
  if (type == kDLCUDA) {
    if (!(p.capabilities() & WT_CAP_CUDA_MEMORY))
      refuse(p, fmt::format("does not declare WT_CAP_CUDA_MEMORY, so it cannot take {} in CUDA "
                            "memory",
                            what()));
  } else if (type == kDLCPU || type == kDLCUDAHost) {
    if (!(p.capabilities() & WT_CAP_HOST_MEMORY))
      refuse(p, fmt::format("does not declare WT_CAP_HOST_MEMORY, so it cannot take {} in host "
                            "memory",
                            what()));
  } else {
    // No capability bit covers other memory (managed, ROCm, ...): nothing a plugin may be handed.
    refuse(p, fmt::format("cannot take {} in DLPack device type {}: wt moves host (kDLCPU, "
                          "kDLCUDAHost) and CUDA (kDLCUDA) memory",
                          what(), static_cast<int>(type)));
  }
}

// Element i of an array of growable structs from a plugin, as the host's own struct: read within
// the element's struct_size, which must hold at least the fields `T` had when it became growable.
template <typename T>
T element(const T* array, std::size_t i, std::size_t min_size, const char* what) {
  uint32_t size = array->struct_size;
  if (size < min_size)
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("{} elements have struct_size {}, smaller than ABI 2's {} bytes", what,
                            size, min_size));
  T out{};
  std::memcpy(&out, reinterpret_cast<const char*>(array) + i * size,
              std::min<std::size_t>(size, sizeof(T)));
  out.struct_size = sizeof(T);
  return out;
}

}  // namespace

namespace {

// What a sharded source declares must describe a slice of the shape, and go only to a plugin that
// moves slices (WT_CAP_SHARDED_SOURCE): any other would send a slice as if it were the tensor.
void check_shards(const Plugin& plugin, const std::vector<ParamMeta>& meta) {
  for (const auto& m : meta) {
    if (!m.sharded()) continue;
    if (!(plugin.capabilities() & WT_CAP_SHARDED_SOURCE) || plugin.abi_version() < 2)
      refuse(plugin, fmt::format("does not take sharded sources (no WT_CAP_SHARDED_SOURCE), but "
                                 "the weight source holds only a slice of '{}'; gather the full "
                                 "tensors first, or use a backend that moves shards (m2n)",
                                 m.name));
    const auto ndim = static_cast<int>(m.shape.size());
    if (m.shard_dim >= ndim)
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("the weight source shards '{}' along dimension {}, but it has {} "
                              "dimension(s)",
                              m.name, m.shard_dim, ndim));
    const int64_t size = m.shape[static_cast<std::size_t>(m.shard_dim)];
    if (m.shard_offset < 0 || m.shard_length < 0 || m.shard_offset > size ||
        m.shard_length > size - m.shard_offset)
      throw Error(
          WT_ERR_INVALID_ARGUMENT,
          fmt::format("the weight source's slice of '{}' ([{}, {}) along dimension {}) "
                      "is not inside its size {} there",
                      m.name, m.shard_offset, m.shard_offset + m.shard_length, m.shard_dim, size));
  }
}

}  // namespace

// The weight source as the plugin sees it: the host's own C view, with each tensor checked against
// the plugin's memory capabilities as it is iterated.
// The weight source as plugins see it. Besides the memory kinds, the host checks that every pass
// agrees with metadata() item for item (name, dtype, shape) and yields exactly as many tensors:
// a pass that disagrees fails at the first mismatch, so no backend can deliver a round whose
// tensors are not the ones it announced (a short pass would otherwise commit a partial model).
struct TrainerEngine::CheckedSource {
  const Plugin& plugin;
  const wt_weight_source* inner;
  wt_weight_source c{};
  std::vector<ParamMeta> declared;  // metadata() as of this pass
  bool fresh = false;               // the plugin called metadata() since the last end()
  std::size_t index = 0;            // items yielded in this pass

  // Copies what metadata() returned (growable elements, stepped by their struct_size).
  void remember(const wt_param_meta* params, std::size_t count) {
    declared.clear();
    for (std::size_t i = 0; i < count; ++i) {
      const auto* m = WT_ELEMENT(wt_param_meta, params, i);
      ParamMeta& d = declared.emplace_back(
          ParamMeta{m->name ? m->name : "", m->dtype,
                    m->ndim > 0 && m->shape ? std::vector<int64_t>(m->shape, m->shape + m->ndim)
                                            : std::vector<int64_t>{}});
      if (m->struct_size >= offsetof(wt_param_meta, shard_length) + sizeof(int64_t) && m->sharded) {
        d.shard_dim = m->shard_dim;
        d.shard_offset = m->shard_offset;
        d.shard_length = m->shard_length;
      }
      if (m->struct_size >= offsetof(wt_param_meta, shard_length) + sizeof(int64_t) && m->sharded &&
          m->shard_dim < 0)
        throw Error(WT_ERR_INVALID_ARGUMENT,
                    fmt::format("the weight source marks '{}' sharded along dimension {}", d.name,
                                m->shard_dim));
    }
    // Every pass's metadata, not only trainer_init's: a source may change what it declares.
    check_shards(plugin, declared);
    fresh = true;
  }
  // The item `out` against the declaration at `index`; throws naming the first difference.
  void check_item(const wt_tensor& out) {
    const std::string name = out.name ? out.name : "";
    if (index >= declared.size())
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("the weight source yields more tensors than the {} its metadata "
                              "declares (item {} is '{}')",
                              declared.size(), index, name));
    const ParamMeta& want = declared[index];
    const DLTensor& t = out.tensor;
    // A sharded parameter arrives as this rank's slice.
    const std::vector<int64_t> want_shape = want.local_shape();
    const bool shape_ok =
        t.ndim == static_cast<int32_t>(want_shape.size()) &&
        (t.ndim == 0 ||
         (t.shape != nullptr && std::equal(want_shape.begin(), want_shape.end(), t.shape)));
    if (name != want.name || !(t.dtype == want.dtype) || !shape_ok) {
      std::vector<int64_t> got;
      if (t.ndim > 0 && t.shape != nullptr) got.assign(t.shape, t.shape + t.ndim);
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("the weight source's item {} is '{}' ({} [{}]) but its metadata "
                              "declares '{}' ({} [{}]) there",
                              index, name, torch_name(t.dtype), fmt::join(got, ", "), want.name,
                              torch_name(want.dtype), fmt::join(want_shape, ", ")));
    }
    ++index;
  }

  CheckedSource(const Plugin& p, const wt_weight_source* source) : plugin(p), inner(source) {
    c = *inner;
    c.ctx = this;
    c.metadata = [](void* ctx, const wt_param_meta** params, size_t* count, char* err, size_t cap) {
      auto* self = static_cast<CheckedSource*>(ctx);
      wt_status s = self->inner->metadata(self->inner->ctx, params, count, err, cap);
      if (s != WT_OK) return s;
      return host_guard(err, cap, [&] { self->remember(*params, *count); });
    };
    c.begin = [](void* ctx, char* err, size_t cap) {
      auto* self = static_cast<CheckedSource*>(ctx);
      self->index = 0;
      // Asking the source ourselves is safe only when the plugin holds no metadata pointer,
      // i.e. it has not asked since the last end() (which ended those pointers).
      if (!self->fresh) {
        const wt_param_meta* params = nullptr;
        size_t count = 0;
        wt_status s = self->inner->metadata(self->inner->ctx, &params, &count, err, cap);
        if (s != WT_OK) return s;
        wt_status r = host_guard(err, cap, [&] { self->remember(params, count); });
        if (r != WT_OK) return r;
      }
      return self->inner->begin(self->inner->ctx, err, cap);
    };
    c.next = [](void* ctx, wt_tensor* out, int32_t* done, char* err, size_t cap) {
      auto* self = static_cast<CheckedSource*>(ctx);
      wt_status s = self->inner->next(self->inner->ctx, out, done, err, cap);
      if (s != WT_OK) return s;
      return host_guard(err, cap, [&] {
        if (*done) {
          if (self->index < self->declared.size())
            throw Error(
                WT_ERR_INVALID_ARGUMENT,
                fmt::format("the weight source ended after {} tensors, but its metadata "
                            "declares {} (the first missing is '{}')",
                            self->index, self->declared.size(), self->declared[self->index].name));
          return;
        }
        check_memory(self->plugin, out->tensor.device.device_type, "tensor",
                     out->name ? out->name : "");
        self->check_item(*out);
      });
    };
    c.end = [](void* ctx) {
      auto* self = static_cast<CheckedSource*>(ctx);
      self->fresh = false;
      self->inner->end(self->inner->ctx);
    };
  }
};

TrainerEngine::TrainerEngine(std::shared_ptr<const Plugin> plugin, Client& client)
    : plugin_(std::move(plugin)), client_(client) {}

TrainerEngine::~TrainerEngine() {
  // Calls a failed round left blocked (an update to a receiver behind a cut link) end now: the
  // engine joins their threads as it goes, and nothing waits for them any more. (Only then: an
  // engine whose rounds all succeeded leaves no call behind, and its client may be gone already.)
  if (failed_round_) client_.abandon_calls();
  if (engine_ != nullptr) plugin_->table().destroy_trainer(engine_);
}

void TrainerEngine::send_weights(const SendOptions& options) {
  const bool sparse = plugin_->capabilities() & WT_CAP_SPARSE;
  if (!options.patches.empty() && !sparse)
    refuse(*plugin_, fmt::format("is a full-resync backend (no WT_CAP_SPARSE): send_weights got "
                                 "{} patch(es) it cannot take",
                                 options.patches.size()));
  std::vector<wt_sparse_patch> patches = options.patches;
  for (auto& p : patches) {
    p.struct_size = sizeof p;
    p.abi_version = WT_ABI_VERSION;
    check_memory(*plugin_, p.values.device.device_type, "the patch values of",
                 p.name ? p.name : "");
    check_memory(*plugin_, p.indices.device.device_type, "the patch indices of",
                 p.name ? p.name : "");
  }
  wt_send_args args{};
  args.struct_size = sizeof args;
  args.abi_version = WT_ABI_VERSION;
  args.weight_version = options.weight_version ? options.weight_version->c_str() : nullptr;
  args.patches = patches.empty() ? nullptr : patches.data();
  args.num_patches = patches.size();
  args.stream = options.stream;
  const auto& t = plugin_->table();
  wt_status s = t.send_weights(engine_, args);
  if (s != WT_OK) failed_round_ = true;
  if (s != WT_OK)
    throw Error(s, fmt::format("{} send_weights failed: {}", plugin_->backend(),
                               reason(t.trainer_last_error(engine_))));
}

void TrainerEngine::abort() {
  wt_status s = plugin_->table().abort_trainer(engine_);
  client_.abort_calls();
  if (s != WT_OK) throw Error(s, fmt::format("{} abort failed", plugin_->backend()));
}

std::unique_ptr<TrainerEngine> trainer_init(const InitInfo& info, Client& client,
                                            WeightSource* source, TrainerGroup* group) {
  const ParsedInitInfo& parsed = info.parsed();  // loads the plugin on first use
  const auto& plugin = parsed.plugin;
  const uint64_t caps = plugin->capabilities();
  if (!(caps & WT_CAP_TRAINER)) refuse(*plugin, "has no trainer engine (no WT_CAP_TRAINER)");
  if ((caps & WT_CAP_SPARSE) && source != nullptr)
    refuse(*plugin,
           "is a delta backend (WT_CAP_SPARSE): it sends the patches given to "
           "send_weights and takes no weight source");
  if (!(caps & WT_CAP_SPARSE) && source == nullptr)
    throw Error(
        WT_ERR_INVALID_ARGUMENT,
        fmt::format("backend '{}' is a full-resync backend: it requires a weight source, and "
                    "trainer_init got none",
                    plugin->backend()));
  if (source != nullptr) check_shards(*plugin, source->metadata());
  auto engine = std::make_unique<TrainerEngine>(plugin, client);
  // A source that frees each tensor as the engine moves on does so only for a plugin that said
  // it reads each tensor before asking for the next (a bit ABI 1 does not define).
  if (source != nullptr)
    source->set_streaming(source->prefers_streaming() && plugin->abi_version() >= 2 &&
                          (caps & WT_CAP_STREAMING_SOURCE) != 0);
  if (source != nullptr)
    engine->source_ = std::make_unique<TrainerEngine::CheckedSource>(*plugin, source->c_source());
  wt_trainer_create_args args{};
  args.struct_size = sizeof args;
  args.abi_version = WT_ABI_VERSION;
  args.host = plugin->host();
  args.info = parsed.object;
  args.client = client.c_client();
  args.source = engine->source_ ? &engine->source_->c : nullptr;
  args.group = group ? group->c_group() : nullptr;
  char err[kErrCap] = {0};
  logger()->info("trainer_init: backend {} rank {}", info.backend(),
                 plugin->table().rank(parsed.object));
  wt_trainer* made = nullptr;
  wt_status s = plugin->table().create_trainer(args, &made, err, sizeof err);
  if (s != WT_OK || made == nullptr)
    throw Error(s != WT_OK ? s : WT_ERR_INTERNAL,
                fmt::format("{} trainer_init failed: {}", info.backend(), reason(err)));
  engine->engine_ = made;
  return engine;
}

void Loader::load_patches(std::span<const wt_sparse_patch>) {
  throw Error(WT_ERR_UNSUPPORTED, "this receiver does not take patches");
}
std::optional<DLTensor> Loader::destination(const ParamMeta&) {
  return std::nullopt;
}
void Loader::written(const std::string& name) {
  throw Error(WT_ERR_STATE,
              fmt::format("written('{}'): this receiver handed out no destinations", name));
}

namespace {

// The wt_loader handed to one receive() call, over a C++ Loader.
struct LoaderView {
  const Plugin& plugin;
  Loader& loader;
  wt_loader c{};

  LoaderView(const Plugin& p, Loader& l) : plugin(p), loader(l) {
    c.struct_size = sizeof c;
    c.abi_version = WT_ABI_VERSION;
    c.ctx = this;
    c.load = [](void* ctx, const wt_tensor* tensors, size_t count, char* err, size_t cap) {
      auto* self = static_cast<LoaderView*>(ctx);
      return host_guard(err, cap, [&] {
        std::vector<wt_tensor> v(count);
        for (size_t i = 0; i < count; ++i) {
          v[i] = element(tensors, i, abi2::kTensorSize, "loaded tensor");
          if (v[i].name == nullptr || *v[i].name == '\0')
            throw Error(WT_ERR_INVALID_ARGUMENT,
                        fmt::format("loaded tensor {} of the batch has no name", i));
          check_memory(self->plugin, v[i].tensor.device.device_type, "tensor", v[i].name);
        }
        self->loader.load(v);
      });
    };
    c.load_patches = [](void* ctx, const wt_sparse_patch* patches, size_t count, char* err,
                        size_t cap) {
      auto* self = static_cast<LoaderView*>(ctx);
      return host_guard(err, cap, [&] {
        if (!(self->plugin.capabilities() & WT_CAP_SPARSE))
          refuse(self->plugin, "loaded patches but is not a delta backend (no WT_CAP_SPARSE)");
        std::vector<wt_sparse_patch> v(count);
        for (size_t i = 0; i < count; ++i) {
          v[i] = element(patches, i, abi2::kSparsePatchSize, "loaded patch");
          if (v[i].name == nullptr)
            throw Error(WT_ERR_INVALID_ARGUMENT,
                        fmt::format("loaded patch {} of the batch has no name", i));
        }
        self->loader.load_patches(v);
      });
    };
    c.destination = [](void* ctx, const wt_param_meta* param, DLTensor* out, int32_t* found,
                       char* err, size_t cap) {
      auto* self = static_cast<LoaderView*>(ctx);
      return host_guard(err, cap, [&] {
        if (param == nullptr || out == nullptr || found == nullptr)
          throw Error(WT_ERR_INVALID_ARGUMENT, "destination() needs param, out and found");
        wt_param_meta m = element(param, 0, abi2::kParamMetaSize, "destination parameter");
        if (m.name == nullptr || m.ndim < 0 || (m.ndim > 0 && m.shape == nullptr))
          throw Error(WT_ERR_INVALID_ARGUMENT,
                      "destination(): the parameter needs a name and a shape");
        ParamMeta meta{m.name, m.dtype, std::vector<int64_t>(m.shape, m.shape + m.ndim)};
        auto d = self->loader.destination(meta);
        if (!d) {
          *found = 0;
          return;
        }
        *out = *d;
        *found = 1;
      });
    };
    c.written = [](void* ctx, const char* name, char* err, size_t cap) {
      auto* self = static_cast<LoaderView*>(ctx);
      return host_guard(err, cap, [&] {
        if (name == nullptr) throw Error(WT_ERR_INVALID_ARGUMENT, "written() needs a name");
        self->loader.written(name);
      });
    };
  }
};

struct FnLoader final : Loader {
  const LoadFn& fn;
  explicit FnLoader(const LoadFn& f) : fn(f) {}
  void load(std::span<const wt_tensor> t) override { fn(t); }
};

}  // namespace

WorkerEngine::WorkerEngine(std::shared_ptr<const Plugin> plugin, wt_worker* engine)
    : plugin_(std::move(plugin)), engine_(engine) {}

WorkerEngine::~WorkerEngine() {
  plugin_->table().destroy_worker(engine_);
}

std::unique_ptr<WorkerEngine> WorkerEngine::create(const std::string& backend,
                                                   std::string_view init_info_json,
                                                   DLDevice device) {
  WorkerOptions o;
  o.device = device;
  return create(backend, init_info_json, o);
}

std::unique_ptr<WorkerEngine> WorkerEngine::create(const std::string& backend,
                                                   std::string_view init_info_json,
                                                   const WorkerOptions& options) {
  auto plugin = Registry::instance().get(backend);
  if (!(plugin->capabilities() & WT_CAP_WORKER))
    refuse(*plugin, "has no worker engine (no WT_CAP_WORKER)");
  check_memory(*plugin, options.device.device_type, "a worker that keeps its weights");
  if (!options.backend_options.is_null() && !options.backend_options.is_object())
    throw Error(WT_ERR_INVALID_ARGUMENT, "backend options must be a JSON object");
  std::string json(init_info_json);
  std::string backend_options =
      options.backend_options.is_null() ? "{}" : options.backend_options.dump();
  wt_worker_create_args args{};
  args.struct_size = sizeof args;
  args.abi_version = WT_ABI_VERSION;
  args.host = plugin->host();
  args.init_info_json = json.c_str();
  args.device = options.device;
  args.stream = options.stream;
  args.backend_options_json = backend_options.c_str();
  std::vector<wt_param_meta> held;
  held.reserve(options.held.size());
  for (const auto& m : options.held) held.push_back(c_param_meta(m));
  args.held = held.empty() ? nullptr : held.data();
  args.held_count = held.size();
  wt_worker* engine = nullptr;
  char err[kErrCap] = {0};
  wt_status s = plugin->table().create_worker(args, &engine, err, sizeof err);
  if (s != WT_OK || engine == nullptr)
    throw Error(s != WT_OK ? s : WT_ERR_INTERNAL,
                fmt::format("{} worker init failed: {}", backend, reason(err)));
  return std::make_unique<WorkerEngine>(plugin, engine);
}

#define WT_WORKER_CALL(slot, ...)                                                      \
  do {                                                                                 \
    const auto& t = plugin_->table();                                                  \
    wt_status s = t.slot(engine_ __VA_OPT__(, ) __VA_ARGS__);                          \
    if (s != WT_OK)                                                                    \
      throw Error(s, fmt::format("{} worker {} failed: {}", plugin_->backend(), #slot, \
                                 reason(t.worker_last_error(engine_))));               \
  } while (0)

void WorkerEngine::start() {
  WT_WORKER_CALL(start);
}
void WorkerEngine::finish() {
  WT_WORKER_CALL(finish);
}
void WorkerEngine::abort() {
  WT_WORKER_CALL(abort_worker);
}

void WorkerEngine::receive(std::string_view update_info_json, Loader& loader) {
  std::string json(update_info_json);
  LoaderView view(*plugin_, loader);
  WT_WORKER_CALL(receive, json.c_str(), view.c);
}

void WorkerEngine::receive(std::string_view update_info_json, const LoadFn& load) {
  FnLoader loader(load);
  receive(update_info_json, loader);
}

#undef WT_WORKER_CALL

}  // namespace wt
