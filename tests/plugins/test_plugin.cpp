// One source, many test plugins: macros choose how each one is broken. It is written against the
// raw C ABI (no SDK scaffolding) so every variant controls exactly what the host sees.
//   WT_TEST_DECLARED_BACKEND  the backend name the plugin declares
//   WT_TEST_ABI               the ABI version it claims to speak (default: the current one)
//   WT_TEST_NO_ENTRY          export a different symbol instead of wt_plugin_get
//   WT_TEST_NULL_SLOT         leave the mandatory trainer.send_weights slot NULL
//   WT_TEST_INIT_FAILS        trainer create returns WT_ERR_SYSTEM
//   WT_TEST_THROWS            trainer create throws a C++ exception internally
//   WT_TEST_CAPS              the capability bits it declares (default: trainer, worker, host)
//   WT_TEST_WIDE_ELEMENTS     behaves as a plugin built against a newer ABI whose wt_tensor is
//                             16 bytes larger: arrays it passes step by that size, and the
//                             wt_tensor it hands next() has room for it (and a canary after)
//   WT_TEST_SHORT_WORKER      its worker table's struct_size ends before receive
// Its worker understands {"inline": [{"name", "values": [floats]}], "in_place": bool,
// "patch": {"name", "indices", "values", "full_shape"}}: tensors it loads (or writes into
// destinations), and a patch it hands to load_patches.
// Hostile variants: what the host must catch without faulting (in-process) or survive (the lister):
//   WT_TEST_GARBAGE_API       wt_plugin_get hands back the API pointer (void*)0x10
//   WT_TEST_MISALIGNED_API    ... a pointer one byte past the real table
//   WT_TEST_FF_TABLE          ... a table made of 0xff bytes
//   WT_TEST_UNTERMINATED      the backend string has no NUL within 64 bytes
//   WT_TEST_RUNS_OFF          the backend string ends at an unreadable page, with no NUL
//   WT_TEST_BAD_NAME          the backend string holds characters no backend name may have
//   WT_TEST_BAD_VTABLE        the trainer vtable pointer is (void*)0x20
//   WT_TEST_BAD_SLOT          trainer.create points into data, not code
//   WT_TEST_CRASHES           wt_plugin_get dies with SIGSEGV
//   WT_TEST_HANGS             wt_plugin_get never returns
#include <wt/wt_plugin.h>
#include <wt/sdk/errors.hpp>
#include <wt/sdk/host_log.hpp>
#include <wt/sdk/host_objects.hpp>
#include <wt/sdk/json_fields.hpp>

#include <nlohmann/json.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#ifndef WT_TEST_ABI
#define WT_TEST_ABI WT_ABI_VERSION
#endif
#ifndef WT_TEST_CAPS
#define WT_TEST_CAPS (WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY)
#endif

// The wt_tensor of a newer ABI: the current one plus a field this host does not know.
struct wide_tensor {
  wt_tensor t;
  uint64_t newer_field;
};
struct plain_tensor {
  wt_tensor t;
};
#ifdef WT_TEST_WIDE_ELEMENTS
using element_tensor = wide_tensor;
#else
using element_tensor = plain_tensor;
#endif

using wt::sdk::guard;
using wt::sdk::guard_into;

struct wt_init_info {
  int64_t rank = 0;
};
struct wt_trainer {
  wt::sdk::ClientRef client;
  wt::sdk::SourceRef source;
  wt::sdk::HostLog log;
  bool sender = true;
  std::string last_error;
};
struct wt_worker {
  std::string last_error;
  std::atomic<bool> active{false};  // abort() may come from another thread
  std::atomic<bool> aborted{false};  // abort() may come from another thread
};

// What one receive() of the test worker delivers: float32 1-D tensors.
struct InlineTensor {
  std::string name;
  std::vector<float> values;
  int64_t shape[1] = {0};
};

namespace {

wt_status parse(const wt_host_api*, const char* json, wt_init_info** out, char* err, size_t cap,
                char* field, size_t field_cap) {
  wt::sdk::write_message(field, field_cap, "");
  return guard_into(err, cap, [&] {
    try {
      auto j =
          wt::sdk::parse_json_text(json, "init_info for backend '" WT_TEST_DECLARED_BACKEND "'");
      wt::sdk::FieldReader r(j, "init_info for backend '" WT_TEST_DECLARED_BACKEND "'");
      r.allow("backend");
      int64_t rank = r.opt_int("rank", 0);
      r.finish();
      *out = new wt_init_info{rank};
    } catch (const wt::sdk::Error& e) {
      wt::sdk::write_message(field, field_cap, e.field());
      throw;
    }
  });
}
wt_status to_json(const wt_init_info* info, char* buf, size_t cap, size_t* needed) {
  std::string text = nlohmann::json{{"rank", info->rank}}.dump();
  *needed = text.size() + 1;
  if (cap < text.size() + 1) return WT_ERR_BUFFER_TOO_SMALL;
  std::memcpy(buf, text.c_str(), text.size() + 1);
  return WT_OK;
}
int64_t rank(const wt_init_info* info) {
  return info->rank;
}
int32_t is_sender(const wt_init_info* info) {
  return info->rank == 0;
}
void destroy_info(wt_init_info* info) {
  delete info;
}

wt_status trainer_create(const wt_trainer_create_args* args, wt_trainer** out, char* err,
                         size_t cap) {
  const wt_host_api* host = args->host;
  const wt_init_info* info = args->info;
  const wt_client* client = args->client;
  const wt_weight_source* source = args->source;
  return guard_into(err, cap, [&] {
#if defined(WT_TEST_INIT_FAILS)
    wt::sdk::fail(WT_ERR_SYSTEM, "test plugin: trainer init failed on purpose");
#elif defined(WT_TEST_THROWS)
    throw std::runtime_error("test plugin: exception thrown inside the plugin");
#endif
    auto t = new wt_trainer{wt::sdk::ClientRef(client), wt::sdk::SourceRef(source),
                            wt::sdk::HostLog(host, "[test] "), info->rank == 0, ""};
    t->log.info("trainer created (rank {})", info->rank);
    if (t->sender) t->client.init_weight_transfer_engine(R"({"echo":true})");
    *out = t;
  });
}

// One round: start, one update naming every tensor of a fresh pass, finish.
[[maybe_unused]] wt_status send_weights(wt_trainer* t, const wt_send_args* args) {
  return guard(t->last_error, [&] {
    if (!t->sender) return;
    nlohmann::json names = nlohmann::json::array();
    t->client.start_weight_update();
    if (t->source.valid()) {
      // Walks the pass through the raw slots: this plugin decides the size of what next() fills.
      const wt_weight_source* src = t->source.raw();
      char err[512] = {0};
      if (src->begin(src->ctx, err, sizeof err) != WT_OK)
        wt::sdk::fail(WT_ERR_REMOTE, "begin: {}", err);
      for (;;) {
        struct {
          element_tensor e;
          uint64_t canary;
        } out{};
        out.canary = 0x5a5a5a5a5a5a5a5aull;
        out.e.t.struct_size = sizeof(element_tensor);
        int32_t done = 0;
        wt_status st = src->next(src->ctx, &out.e.t, &done, err, sizeof err);
        if (st != WT_OK) {
          src->end(src->ctx);
          wt::sdk::fail(st, "next: {}", err);
        }
        if (done) break;
        if (out.canary != 0x5a5a5a5a5a5a5a5aull || out.e.t.struct_size > sizeof(element_tensor)) {
          src->end(src->ctx);
          wt::sdk::fail(WT_ERR_INTERNAL, "the host wrote beyond the wt_tensor this plugin sized");
        }
        names.push_back(out.e.t.name);
      }
      src->end(src->ctx);
    }
    t->client.update_weights(nlohmann::json{{"names", names}}.dump());
    t->client.finish_weight_update(args ? args->weight_version : nullptr);
  });
}
wt_status trainer_abort(wt_trainer*) {
  return WT_OK;
}
const char* trainer_last_error(const wt_trainer* t) {
  return t->last_error.c_str();
}
void trainer_destroy(wt_trainer* t) {
  delete t;
}

wt_status worker_create(const wt_worker_create_args*, wt_worker** out, char*, size_t) {
  *out = new wt_worker{};
  return WT_OK;
}
wt_status worker_start(wt_worker* w) {
  w->active = true;
  w->aborted = false;
  return WT_OK;
}
wt_status worker_receive(wt_worker* w, const char* json, const wt_loader* loader) {
  if (!w->active) {
    w->last_error = "receive before start";
    return WT_ERR_STATE;
  }
  return guard(w->last_error, [&] {
    auto j = wt::sdk::parse_json_text(json, "update_info");
    // A transfer that never completes on its own: only abort() (from another thread) ends it.
    if (j.contains("block_until_abort")) {
      while (!w->aborted) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      throw wt::sdk::Error(WT_ERR_ABORTED, "aborted while blocked in a transfer");
    }
    char err[512] = {0};
    auto check = [&](wt_status st, const char* what) {
      if (st != WT_OK) wt::sdk::fail(st, "{}: {}", what, err);
    };
    if (j.contains("inline")) {
      std::vector<InlineTensor> items;
      for (const auto& x : j["inline"])
        items.push_back({x["name"].get<std::string>(), x["values"].get<std::vector<float>>()});
      std::vector<element_tensor> batch;
      for (auto& it : items) {
        it.shape[0] = static_cast<int64_t>(it.values.size());
        DLTensor d{it.values.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, it.shape, nullptr, 0};
        if (j.value("in_place", false)) {
          wt_param_meta m{};
          m.struct_size = sizeof m;
          m.abi_version = WT_ABI_VERSION;
          m.name = it.name.c_str();
          m.dtype = d.dtype;
          m.ndim = 1;
          m.shape = it.shape;
          DLTensor dst{};
          int32_t found = 0;
          check(loader->destination(loader->ctx, &m, &dst, &found, err, sizeof err), "destination");
          if (found) {
            std::memcpy(dst.data, it.values.data(), it.values.size() * sizeof(float));
            check(loader->written(loader->ctx, it.name.c_str(), err, sizeof err), "written");
            continue;
          }
        }
        element_tensor e{};
        e.t.struct_size = sizeof(element_tensor);
        e.t.abi_version = WT_ABI_VERSION;
        e.t.name = it.name.c_str();
        e.t.tensor = d;
        batch.push_back(e);
      }
      if (!batch.empty())
        check(loader->load(loader->ctx, &batch[0].t, batch.size(), err, sizeof err), "load");
    }
    if (j.contains("patch")) {
      // One patch, or a list of them handed over as one batch.
      auto list = j["patch"].is_array() ? j["patch"] : nlohmann::json::array({j["patch"]});
      struct Owned {
        std::string name;
        std::vector<int32_t> idx;
        std::vector<float> vals;
        std::vector<int64_t> full;
        int64_t n[1], nv[1];
      };
      std::vector<Owned> owned(list.size());
      std::vector<wt_sparse_patch> batch(list.size());
      for (std::size_t i = 0; i < list.size(); ++i) {
        auto& o = owned[i];
        o.name = list[i]["name"].get<std::string>();
        o.idx = list[i]["indices"].get<std::vector<int32_t>>();
        o.vals = list[i]["values"].get<std::vector<float>>();
        o.full = list[i]["full_shape"].get<std::vector<int64_t>>();
        o.n[0] = static_cast<int64_t>(o.idx.size());
        o.nv[0] = static_cast<int64_t>(o.vals.size());
        auto& patch = batch[i];
        patch.struct_size = sizeof patch;
        patch.abi_version = WT_ABI_VERSION;
        patch.name = o.name.c_str();
        patch.indices = DLTensor{o.idx.data(), {kDLCPU, 0}, 1, {kDLInt, 32, 1}, o.n, nullptr, 0};
        patch.values = DLTensor{o.vals.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, o.nv, nullptr, 0};
        patch.full_ndim = static_cast<int32_t>(o.full.size());
        patch.full_shape = o.full.data();
      }
      check(loader->load_patches(loader->ctx, batch.data(), batch.size(), err, sizeof err),
            "load_patches");
    }
  });
}
wt_status worker_finish(wt_worker* w) {
  w->active = false;
  return WT_OK;
}
wt_status worker_abort(wt_worker* w) {
  w->aborted = true;
  return worker_finish(w);
}
const char* worker_last_error(const wt_worker* w) {
  return w->last_error.c_str();
}
void worker_destroy(wt_worker* w) {
  delete w;
}

#if defined(WT_TEST_UNTERMINATED)
// 100 'x' and no NUL (followed by whatever the linker puts next).
constexpr std::array<char, 100> kUnterminated = [] {
  std::array<char, 100> a{};
  a.fill('x');
  return a;
}();
#define WT_TEST_BACKEND_STRING kUnterminated.data()
#elif defined(WT_TEST_BAD_NAME)
#define WT_TEST_BACKEND_STRING "Bad Name!\x01"
#elif defined(WT_TEST_RUNS_OFF)
// Set by wt_plugin_get: "runsoff" written at the very end of a readable page followed by a
// PROT_NONE page, with no NUL.
const char* runs_off_string() {
  long page = sysconf(_SC_PAGESIZE);
  void* m = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  char* end = static_cast<char*>(m) + page;
  std::memcpy(end - 7, "runsoff", 7);
  mprotect(end, page, PROT_NONE);
  return end - 7;
}
#define WT_TEST_BACKEND_STRING runs_off_string()
#else
#define WT_TEST_BACKEND_STRING WT_TEST_DECLARED_BACKEND
#endif

#ifdef WT_TEST_BAD_SLOT
int not_code = 0;
#endif

const wt_init_info_vtable kInitInfo = {
    sizeof(wt_init_info_vtable), WT_TEST_ABI, &parse, &to_json, &rank, &is_sender, &destroy_info};
#ifdef WT_TEST_NULL_SLOT
const wt_trainer_vtable kTrainer = {
    sizeof(wt_trainer_vtable), WT_TEST_ABI,     &trainer_create, nullptr, &trainer_abort,
    &trainer_last_error,       &trainer_destroy};
#elif defined(WT_TEST_BAD_SLOT)
const wt_trainer_vtable kTrainer = {sizeof(wt_trainer_vtable),
                                    WT_TEST_ABI,
                                    reinterpret_cast<decltype(&trainer_create)>(&not_code),
                                    &send_weights,
                                    &trainer_abort,
                                    &trainer_last_error,
                                    &trainer_destroy};
#else
const wt_trainer_vtable kTrainer = {
    sizeof(wt_trainer_vtable), WT_TEST_ABI,     &trainer_create, &send_weights, &trainer_abort,
    &trainer_last_error,       &trainer_destroy};
#endif
#ifdef WT_TEST_SHORT_WORKER
constexpr uint32_t kWorkerSize = offsetof(wt_worker_vtable, receive);
#else
constexpr uint32_t kWorkerSize = sizeof(wt_worker_vtable);
#endif
const wt_worker_vtable kWorker = {kWorkerSize,   WT_TEST_ABI,        &worker_create,
                                  &worker_start, &worker_receive,    &worker_finish,
                                  &worker_abort, &worker_last_error, &worker_destroy};
#ifdef WT_TEST_BAD_VTABLE
const wt_trainer_vtable* const kTrainerPtr = reinterpret_cast<const wt_trainer_vtable*>(0x20);
#else
const wt_trainer_vtable* const kTrainerPtr = &kTrainer;
#endif
const wt_plugin_api kApi = {
    sizeof(wt_plugin_api), WT_TEST_ABI, WT_TEST_BACKEND_STRING, "9.9.9", WT_TEST_CAPS, &kInitInfo,
    kTrainerPtr,           &kWorker};

#ifdef WT_TEST_FF_TABLE
alignas(wt_plugin_api) constexpr std::array<unsigned char, 256> kFF = [] {
  std::array<unsigned char, 256> a{};
  a.fill(0xff);
  return a;
}();
#endif

wt_status negotiate(uint32_t host_abi, uint32_t* plugin_abi, const wt_plugin_api** api) {
#if defined(WT_TEST_CRASHES)
  // A real SIGSEGV on an unmapped page, not a trap the compiler chose, and not a null store that
  // UBSan would stop first with an exit code of its own.
  volatile uintptr_t unmapped = 64;
  *reinterpret_cast<volatile int*>(unmapped) = 42;
#elif defined(WT_TEST_HANGS)
  for (;;) pause();
#endif
  *plugin_abi = WT_TEST_ABI;
  if (WT_TEST_ABI > host_abi) return WT_ERR_INCOMPATIBLE;
#if defined(WT_TEST_GARBAGE_API)
  *api = reinterpret_cast<const wt_plugin_api*>(0x10);
#elif defined(WT_TEST_MISALIGNED_API)
  *api = reinterpret_cast<const wt_plugin_api*>(reinterpret_cast<const char*>(&kApi) + 1);
#elif defined(WT_TEST_FF_TABLE)
  *api = reinterpret_cast<const wt_plugin_api*>(kFF.data());
#else
  *api = &kApi;
#endif
  return WT_OK;
}

}  // namespace

#ifdef WT_TEST_NO_ENTRY
extern "C" WT_PLUGIN_EXPORT wt_status wt_plugin_get_wrong_name(uint32_t h, uint32_t* p,
                                                               const wt_plugin_api** a) {
  return negotiate(h, p, a);
}
#else
extern "C" WT_PLUGIN_EXPORT wt_status wt_plugin_get(uint32_t h, uint32_t* p,
                                                    const wt_plugin_api** a) {
  return negotiate(h, p, a);
}
#endif
