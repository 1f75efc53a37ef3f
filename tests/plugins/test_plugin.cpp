// One source, many test plugins: macros choose how each one is broken. It is written against the
// raw C ABI (no SDK scaffolding) so every variant controls exactly what the host sees. This file
// holds only the tables and the entry point; the engines they point at are shared by every variant
// (test_plugin_engines.cpp, compiled once).
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
// Variants that break one check of `wt conformance` each:
//   WT_TEST_FORGES            to_json writes fake verdict lines into every pipe descriptor
//   WT_TEST_LEAKS             trainer create leaks a descriptor, a file in $TMPDIR and a daemon
//                             (fork, setsid, fork) that sleeps forever
//   WT_TEST_DEAF_ABORT        send_weights calls update_weights({"deaf": true}) before reading
//                             its source, and the worker's receive of it ignores abort for 7 s
//   WT_TEST_FORGES_NONCE      wt_plugin_get always fails, after writing pass verdicts carrying
//                             the run's nonce (read from its own process's memory) for every
//                             check from `load` on, in order, and exiting 0
//   WT_TEST_RETRIES           send_weights retries a failed update_weights for 60 s (a trainer
//                             that never gives up on a dead worker)
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
#include "test_plugin_engines.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#ifndef WT_TEST_ABI
#define WT_TEST_ABI WT_ABI_VERSION
#endif
#ifndef WT_TEST_CAPS
#define WT_TEST_CAPS (WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY)
#endif

const wt::test_plugin::Variant& wt::test_plugin::variant() {
  static const Variant v{WT_TEST_DECLARED_BACKEND,
#ifdef WT_TEST_INIT_FAILS
                         true,
#else
                         false,
#endif
#ifdef WT_TEST_THROWS
                         true,
#else
                         false,
#endif
#ifdef WT_TEST_WIDE_ELEMENTS
                         true,
#else
                         false,
#endif
#ifdef WT_TEST_FORGES
                         true,
#else
                         false,
#endif
#ifdef WT_TEST_LEAKS
                         true,
#else
                         false,
#endif
#ifdef WT_TEST_DEAF_ABORT
                         true,
#else
                         false,
#endif
#ifdef WT_TEST_RETRIES
                         true};
#else
                         false};
#endif
  return v;
}

namespace {

using namespace wt::test_plugin;

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
#elif defined(WT_TEST_FORGES_NONCE)
  // Claims a clean run in wt conformance's report channel, and never loads anywhere.
  wt::test_plugin::forge_verdicts_with_nonce();
  (void)host_abi, (void)plugin_abi, (void)api;
  return WT_ERR_INTERNAL;
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
