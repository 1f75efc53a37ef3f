#include "nccl_communicator.hpp"

#include <wt/sdk/base64.hpp>
#include <wt/sdk/errors.hpp>

#ifdef WT_PLUGIN_WITH_CUDA
#include <wt/sdk/cuda_driver.hpp>

#include <dlfcn.h>
#include <nccl.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace wt::plugins {

using sdk::fail;

std::string NcclCommunicator::decode_unique_id(const std::string& b64, const std::string& field) {
  std::string raw = sdk::base64_decode(
      b64, "field '" + field + "' (standard base64; URL-safe base64 is not accepted)");
  if (raw.size() != 128)
    sdk::fail_field(field, WT_ERR_INVALID_ARGUMENT,
                    "invalid field '{}': an NCCL unique id is 128 bytes, this one decodes to {}",
                    field, raw.size());
  return raw;
}

#ifdef WT_PLUGIN_WITH_CUDA

namespace {

namespace drv = sdk::cuda;

// How long a healthy communicator's teardown may take before it is aborted instead.
constexpr std::chrono::milliseconds kFinalizeDeadline{10'000};

// The NCCL entry points wt uses, from the library found at run time.
struct Nccl {
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclCommFinalize) CommFinalize = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclBroadcast) Broadcast = nullptr;
  decltype(&ncclSend) Send = nullptr;
  decltype(&ncclRecv) Recv = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  int version = 0;
};

struct LoadedNccl {
  std::unique_ptr<Nccl> nccl;
  std::string why;
};

LoadedNccl load_nccl() {
  LoadedNccl out;
  const char* path = std::getenv("WT_NCCL_LIBRARY");
  const std::string name = path && *path ? path : "libnccl.so.2";
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed
  if (lib == nullptr) {
    const char* e = dlerror();
    out.why = fmt::format(
        "NCCL is not available here: {} could not be loaded ({}); the nccl backend needs it for "
        "CUDA memory (set WT_NCCL_LIBRARY to its path), host memory goes over Gloo",
        name, e ? e : "not found");
    return out;
  }
  auto n = std::make_unique<Nccl>();
  auto get = [&](const char* sym, auto& slot) {
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(dlsym(lib, sym));
    if (slot == nullptr && out.why.empty())
      out.why = fmt::format("{} has no {} (wt needs NCCL 2.14 or newer)", name, sym);
  };
  get("ncclGetVersion", n->GetVersion);
  get("ncclGetUniqueId", n->GetUniqueId);
  get("ncclCommInitRankConfig", n->CommInitRankConfig);
  get("ncclCommGetAsyncError", n->CommGetAsyncError);
  get("ncclCommFinalize", n->CommFinalize);
  get("ncclCommAbort", n->CommAbort);
  get("ncclCommDestroy", n->CommDestroy);
  get("ncclBroadcast", n->Broadcast);
  get("ncclSend", n->Send);
  get("ncclRecv", n->Recv);
  get("ncclGroupStart", n->GroupStart);
  get("ncclGroupEnd", n->GroupEnd);
  get("ncclAllReduce", n->AllReduce);
  get("ncclGetErrorString", n->GetErrorString);
  if (!out.why.empty()) return out;
  n->GetVersion(&n->version);
  out.nccl = std::move(n);
  return out;
}

const Nccl& nccl() {
  static const LoadedNccl l = load_nccl();
  if (!l.nccl) throw sdk::Error(WT_ERR_UNSUPPORTED, l.why);
  return *l.nccl;
}

std::string nccl_text(ncclResult_t r) {
  const char* s = nccl().GetErrorString(r);
  return fmt::format("{} (ncclResult {})", s ? s : "unknown error", static_cast<int>(r));
}

void check_nccl(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  fail(WT_ERR_DEVICE, "{} failed: {}", what, nccl_text(r));
}

ncclDataType_t nccl_type(DLDataType t, std::size_t bytes, std::size_t* count) {
  auto as = [&](ncclDataType_t type, std::size_t size) {
    if (bytes % size != 0) return (*count = bytes, ncclUint8);
    *count = bytes / size;
    return type;
  };
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return as(ncclFloat32, 4);
    if (t.code == kDLFloat && t.bits == 16) return as(ncclFloat16, 2);
    if (t.code == kDLFloat && t.bits == 64) return as(ncclFloat64, 8);
    if (t.code == kDLBfloat && t.bits == 16) return as(ncclBfloat16, 2);
    if (t.code == kDLInt && t.bits == 32) return as(ncclInt32, 4);
    if (t.code == kDLInt && t.bits == 64) return as(ncclInt64, 8);
    if (t.code == kDLInt && t.bits == 8) return as(ncclInt8, 1);
    if (t.code == kDLUInt && t.bits == 32) return as(ncclUint32, 4);
    if (t.code == kDLUInt && t.bits == 64) return as(ncclUint64, 8);
  }
  *count = bytes;  // uint8, bool, float8 and the rest: bytes (packed chunks are uint8 too)
  return ncclUint8;
}

}  // namespace

struct NcclCommunicator::State {
  int device = 0;
  std::chrono::milliseconds transfer_timeout{};
  ncclComm_t comm = nullptr;
  std::unique_ptr<drv::OwnStream> stream;
  PFN_cuStreamQuery_v2000 stream_query = nullptr;
  std::mutex mu;  // comm's abort against its use
  std::atomic<bool> aborted{false};
  std::atomic<bool> broken{false};
  // The owner's abort while the constructor still runs (nobody holds the communicator yet).
  const sdk::AbortSignal* creation_abort = nullptr;

  // A constructor that throws runs no destructor: the communicator it made goes with its state.
  ~State() { kill(); }

  // Aborts the communicator once; every later operation fails.
  void kill() {
    std::lock_guard<std::mutex> l(mu);
    broken = true;
    if (comm != nullptr) {
      nccl().CommAbort(comm);
      comm = nullptr;
    }
  }

  // The watchdog: polls until the communicator's pending operation and, with `stream_done`, the
  // stream are done, an error shows, the deadline passes or abort() is called.
  void wait(const std::string& what, std::chrono::milliseconds deadline, bool stream_done) {
    const auto end = std::chrono::steady_clock::now() + deadline;
    for (;;) {
      if (aborted || (creation_abort != nullptr && creation_abort->aborted())) {
        kill();
        fail(WT_ERR_ABORTED, "{}: aborted", what);
      }
      ncclResult_t state = ncclSuccess;
      {
        std::lock_guard<std::mutex> l(mu);
        if (comm == nullptr) fail(WT_ERR_STATE, "{}: the NCCL communicator is gone", what);
        nccl().CommGetAsyncError(comm, &state);
      }
      if (state != ncclSuccess && state != ncclInProgress) {
        std::string text = nccl_text(state);
        kill();
        fail(WT_ERR_REMOTE, "{}: NCCL reports {} (a peer went away?)", what, text);
      }
      if (state == ncclSuccess) {
        if (!stream_done) return;
        drv::DeviceGuard g(device);
        CUresult q = stream_query(stream->get());
        if (q == CUDA_SUCCESS) return;
        if (q != CUDA_ERROR_NOT_READY) {
          kill();
          drv::check(q, "cuStreamQuery");
        }
      }
      if (std::chrono::steady_clock::now() >= end) {
        kill();
        fail(WT_ERR_TIMEOUT, "{}: not done within {} ms (a peer did not take part in time)", what,
             deadline.count());
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
};

std::string NcclCommunicator::unique_id_b64() {
  ncclUniqueId id{};
  check_nccl(nccl().GetUniqueId(&id), "ncclGetUniqueId");
  return sdk::base64_encode(&id, sizeof id);
}

NcclCommunicator::NcclCommunicator(const std::string& unique_id_b64, int rank, int world_size,
                                   int device, std::chrono::milliseconds rendezvous_timeout,
                                   std::chrono::milliseconds transfer_timeout,
                                   const sdk::AbortSignal* aborted)
    : s_(std::make_unique<State>()) {
  s_->creation_abort = aborted;
  const std::string raw = decode_unique_id(unique_id_b64, "nccl_unique_id_b64");
  const Nccl& n = nccl();
  s_->device = device;
  s_->transfer_timeout = transfer_timeout;
  s_->stream = std::make_unique<drv::OwnStream>(device);
  s_->stream_query = drv::driver().entry<PFN_cuStreamQuery_v2000>("cuStreamQuery");
  if (s_->stream_query == nullptr)
    fail(WT_ERR_UNSUPPORTED, "the NVIDIA driver does not provide cuStreamQuery");
  ncclUniqueId id{};
  std::memcpy(&id, raw.data(), sizeof id);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait is ours, with a deadline
  const std::string what = fmt::format("NCCL communicator of {} ranks (this is rank {}, cuda:{})",
                                       world_size, rank, device);
  {
    drv::DeviceGuard g(device);
    check_nccl(n.CommInitRankConfig(&s_->comm, world_size, id, rank, &config),
               "ncclCommInitRankConfig for the " + what);
  }
  s_->wait("creating the " + what, rendezvous_timeout, false);
  // vLLM's workers all-reduce one float32 zero right after creating theirs: match it.
  CUdeviceptr one = 0;
  {
    drv::DeviceGuard g(device);
    drv::check(drv::driver().MemAlloc(&one, 4), "cuMemAlloc of the warm-up element");
  }
  try {
    {
      drv::DeviceGuard g(device);
      const float zero = 0;  // pageable: the copy has read it when the call returns
      drv::check(drv::driver().MemcpyAsync(one, reinterpret_cast<CUdeviceptr>(&zero), 4,
                                           s_->stream->get()),
                 "cuMemcpyAsync of the warm-up element");
      std::lock_guard<std::mutex> l(s_->mu);
      check_nccl(n.AllReduce(reinterpret_cast<void*>(one), reinterpret_cast<void*>(one), 1,
                             ncclFloat32, ncclSum, s_->comm, s_->stream->get()),
                 "the warm-up all-reduce");
    }
    s_->wait("the warm-up all-reduce of the " + what, rendezvous_timeout, true);
  } catch (...) {
    drv::DeviceGuard g(device);
    drv::driver().MemFree(one);
    throw;
  }
  drv::DeviceGuard g(device);
  drv::driver().MemFree(one);
  s_->creation_abort = nullptr;  // from here abort() is the owner's way in
}

NcclCommunicator::~NcclCommunicator() {
  if (!s_) return;
  {
    std::lock_guard<std::mutex> l(s_->mu);
    if (s_->comm == nullptr) return;  // one that failed was aborted already
  }
  // A healthy communicator is finalized (its pending work flushed) within a deadline, then
  // destroyed; one that errs or does not finish in time is aborted, so teardown never hangs on a
  // peer that went away.
  try {
    {
      drv::DeviceGuard g(s_->device);
      std::lock_guard<std::mutex> l(s_->mu);
      check_nccl(nccl().CommFinalize(s_->comm), "ncclCommFinalize");
    }
    s_->wait("finalizing the NCCL communicator", std::min(s_->transfer_timeout, kFinalizeDeadline),
             false);
    std::lock_guard<std::mutex> l(s_->mu);
    nccl().CommDestroy(s_->comm);
    s_->comm = nullptr;
  } catch (const sdk::Error&) {
    s_->kill();  // wait() aborted it already where it failed; an early throw lands here
  }
}

void NcclCommunicator::broadcast(void* data, std::size_t bytes, DLDataType dtype, int root,
                                 const std::string& what) {
  if (s_->aborted) fail(WT_ERR_ABORTED, "{}: aborted", what);
  if (s_->broken) fail(WT_ERR_STATE, "the NCCL communicator broke earlier; initialise again");
  if (bytes == 0) return;
  std::size_t count = 0;
  const ncclDataType_t type = nccl_type(dtype, bytes, &count);
  {
    drv::DeviceGuard g(s_->device);
    std::lock_guard<std::mutex> l(s_->mu);
    if (s_->comm == nullptr) fail(WT_ERR_STATE, "{}: the NCCL communicator is gone", what);
    check_nccl(nccl().Broadcast(data, data, count, type, root, s_->comm, s_->stream->get()), what);
  }
  s_->wait(what, s_->transfer_timeout, true);
}

void NcclCommunicator::exchange(const std::vector<P2p>& ops, const std::string& what) {
  if (s_->aborted) fail(WT_ERR_ABORTED, "{}: aborted", what);
  if (s_->broken) fail(WT_ERR_STATE, "the NCCL communicator broke earlier; initialise again");
  if (ops.empty()) return;
  {
    drv::DeviceGuard g(s_->device);
    std::lock_guard<std::mutex> l(s_->mu);
    if (s_->comm == nullptr) fail(WT_ERR_STATE, "{}: the NCCL communicator is gone", what);
    const Nccl& n = nccl();
    check_nccl(n.GroupStart(), "ncclGroupStart for " + what);
    ncclResult_t first = ncclSuccess;
    for (const P2p& op : ops) {
      if (op.bytes == 0) continue;
      const ncclResult_t r =
          op.send ? n.Send(op.data, op.bytes, ncclUint8, op.peer, s_->comm, s_->stream->get())
                  : n.Recv(op.data, op.bytes, ncclUint8, op.peer, s_->comm, s_->stream->get());
      if (first == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first = r;
    }
    // The group is ended whatever happened inside it (NCCL requires it), then judged.
    const ncclResult_t end = n.GroupEnd();
    if (first != ncclSuccess || (end != ncclSuccess && end != ncclInProgress)) {
      const std::string text = nccl_text(first != ncclSuccess ? first : end);
      s_->broken = true;
      nccl().CommAbort(s_->comm);
      s_->comm = nullptr;
      fail(WT_ERR_DEVICE, "{}: NCCL refused the sends and receives: {}", what, text);
    }
  }
  s_->wait(what, s_->transfer_timeout, true);
}

void NcclCommunicator::abort() {
  s_->aborted = true;  // the waiting thread aborts the communicator (it may be mid-call)
}

bool NcclCommunicator::broken() const {
  return s_->broken || s_->aborted;
}

void* NcclCommunicator::stream() const {
  return s_->stream->get();
}

#else  // built without the CUDA toolkit

struct NcclCommunicator::State {};

std::string NcclCommunicator::unique_id_b64() {
  fail(WT_ERR_UNSUPPORTED,
       "this plugin was built without the CUDA toolkit: CUDA memory over NCCL is unsupported");
}
NcclCommunicator::NcclCommunicator(const std::string&, int, int, int, std::chrono::milliseconds,
                                   std::chrono::milliseconds, const sdk::AbortSignal*) {
  unique_id_b64();
}
NcclCommunicator::~NcclCommunicator() = default;
void NcclCommunicator::broadcast(void*, std::size_t, DLDataType, int, const std::string&) {
  unique_id_b64();
}
void NcclCommunicator::exchange(const std::vector<P2p>&, const std::string&) {
  unique_id_b64();
}
void NcclCommunicator::abort() {}
bool NcclCommunicator::broken() const {
  return true;
}
void* NcclCommunicator::stream() const {
  return nullptr;
}

#endif

}  // namespace wt::plugins
