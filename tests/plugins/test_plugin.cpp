// One source, many test plugins: macros choose how each one is broken. It is written against the
// raw C ABI (no SDK scaffolding) so every variant controls exactly what the host sees.
//   WT_TEST_DECLARED_BACKEND  the backend name the plugin declares
//   WT_TEST_ABI               the ABI version it claims to speak (default: the current one)
//   WT_TEST_NO_ENTRY          export a different symbol instead of wt_plugin_get
//   WT_TEST_NULL_SLOT         leave the mandatory trainer.send_weights slot NULL
//   WT_TEST_INIT_FAILS        trainer create returns WT_ERR_SYSTEM
//   WT_TEST_THROWS            trainer create throws a C++ exception internally
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
#include <cstring>
#include <stdexcept>
#include <string>

#ifndef WT_TEST_ABI
#define WT_TEST_ABI WT_ABI_VERSION
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
  bool active = false;
};

namespace {

wt_status parse(const wt_host_api*, const char* json, wt_init_info** out, char* err, size_t cap) {
  return guard_into(err, cap, [&] {
    auto j = wt::sdk::parse_json_text(json, "init_info for backend '" WT_TEST_DECLARED_BACKEND "'");
    wt::sdk::FieldReader r(j, "init_info for backend '" WT_TEST_DECLARED_BACKEND "'");
    r.allow("backend");
    int64_t rank = r.opt_int("rank", 0);
    r.finish();
    *out = new wt_init_info{rank};
  });
}
wt_status to_json(const wt_init_info* info, char* buf, size_t cap, size_t* needed) {
  std::string text = nlohmann::json{{"rank", info->rank}}.dump();
  *needed = text.size() + 1;
  if (cap < text.size() + 1) return WT_ERR_INVALID_ARGUMENT;
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

wt_status trainer_create(const wt_host_api* host, const wt_init_info* info, const wt_client* client,
                         const wt_weight_source* source, const wt_trainer_group*, wt_trainer** out,
                         char* err, size_t cap) {
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
    {
      auto pass = t->source.begin();
      wt_tensor tensor{};
      while (pass.next(&tensor)) names.push_back(tensor.name);
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

wt_status worker_create(const wt_host_api*, const char*, const wt_worker_options*, wt_worker** out,
                        char*, size_t) {
  *out = new wt_worker{};
  return WT_OK;
}
wt_status worker_start(wt_worker* w) {
  w->active = true;
  return WT_OK;
}
wt_status worker_receive(wt_worker* w, const char*, wt_load_fn, void*) {
  if (w->active) return WT_OK;
  w->last_error = "receive before start";
  return WT_ERR_STATE;
}
wt_status worker_finish(wt_worker* w) {
  w->active = false;
  return WT_OK;
}
wt_status worker_abort(wt_worker* w) {
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
const wt_worker_vtable kWorker = {
    sizeof(wt_worker_vtable), WT_TEST_ABI,   &worker_create,     &worker_start,  &worker_receive,
    &worker_finish,           &worker_abort, &worker_last_error, &worker_destroy};
#ifdef WT_TEST_BAD_VTABLE
const wt_trainer_vtable* const kTrainerPtr = reinterpret_cast<const wt_trainer_vtable*>(0x20);
#else
const wt_trainer_vtable* const kTrainerPtr = &kTrainer;
#endif
const wt_plugin_api kApi = {sizeof(wt_plugin_api),
                            WT_TEST_ABI,
                            WT_TEST_BACKEND_STRING,
                            "9.9.9",
                            WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY,
                            &kInitInfo,
                            kTrainerPtr,
                            &kWorker};

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
