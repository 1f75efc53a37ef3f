#include <wt/services/receiver.hpp>

#include <wt/dtype.hpp>
#include <wt/error.hpp>
#include <wt/json_parse.hpp>
#include <wt/log.hpp>
#include <wt/registry.hpp>
#include <wt/sdk/parallel_copy.hpp>
#include <wt/sdk/parallel_for.hpp>
#include <wt/checksum.hpp>

#include <wt/services/sparse_patches.hpp>
#include "staging_arena.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <string_view>
#include <thread>

namespace wt {

namespace {

// Received tensors are aligned for their element type (at most 16 bytes), so that back-to-back
// tensors of the usual sizes stay adjacent.
std::size_t alignment_of(DLDataType dtype) {
  std::size_t a = 1;
  while (a < 16 && a < element_size(dtype)) a *= 2;
  return a;
}

// Tensors move between staged, committed and spare as map nodes: no allocation per tensor and
// round. `to` keeps the node's tensor under its name, replacing what it held there.
void move_node(Receiver::TensorMap::node_type node, Receiver::TensorMap& to) {
  auto r = to.insert(std::move(node));
  if (!r.inserted) r.position->second = std::move(r.node.mapped());
}

}  // namespace

Receiver::Receiver(Options options)
    : options_(std::move(options)),
      arena_(std::make_unique<detail::StagingArena>()),
      load_threads_(options_.load_threads > 0 ? options_.load_threads : default_copy_threads()) {
  if (options_.backend.empty())
    throw Error(WT_ERR_INVALID_ARGUMENT, "the receiver needs a backend name");
  if (options_.device.device_type != kDLCPU && !options_.device_staging)
    throw Error(WT_ERR_INVALID_ARGUMENT,
                "a receiver on a device needs Options::device_staging to bring tensors to host");
  if (options_.expect_model_bytes > 0) {
    const uint64_t bytes = options_.expect_model_bytes;  // two rounds' worth
    prepare_staging(bytes > UINT64_MAX / 2 ? bytes : 2 * bytes, true, "for the model expected");
    next_round_prepared_ = true;
  }
}

namespace {

// MemAvailable of /proc/meminfo, in bytes (0 if unknown).
uint64_t available_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

}  // namespace

uint64_t Receiver::committed_bytes_locked() const {
  uint64_t bytes = 0;
  for (const auto& [name, t] : committed_) bytes += t.nbytes;
  return bytes;
}

void Receiver::prepare_staging(uint64_t bytes, bool wait, const char* why) noexcept {
  if (options_.device_staging) return;  // pinned memory from the device staging instead
  bytes += bytes >> 10;                 // room for each tensor's alignment
  try {
    // A delta backend's rounds patch the committed tensors: they stage no copy to prepare for.
    if (Registry::instance().get(options_.backend)->capabilities() & WT_CAP_SPARSE) return;
  } catch (...) {
    return;  // an unknown backend fails at init, with its reason; nothing to prepare for it
  }
  try {
    // Faulting in more than the machine has would wake the OOM killer, not speed anything up.
    if (const uint64_t avail = available_memory(); avail == 0 || bytes > avail / 10 * 8) {
      logger()->info(
          "receiver: staging memory {} not faulted in ahead: {:.2f} GiB is more than 80 % "
          "of the {:.2f} GiB available; the first rounds fault their own",
          why, static_cast<double>(bytes) / (1 << 30), static_cast<double>(avail) / (1 << 30));
      return;
    }
    int error = 0;
    const double took =
        arena_->prepare(static_cast<std::size_t>(std::min<uint64_t>(bytes, SIZE_MAX / 2)),
                        load_threads_, wait, &error);
    if (took < 0)
      logger()->info(
          "receiver: staging memory {} not faulted in ahead ({:.2f} GiB): {}; the "
          "first rounds fault their own",
          why, static_cast<double>(bytes) / (1 << 30),
          error == EINVAL ? "this kernel has no MADV_POPULATE_WRITE (Linux 5.14)"
                          : std::strerror(error));
    else if (wait)
      logger()->info("receiver: staging memory {} faulted in: {:.2f} GiB in {:.2f} s", why,
                     static_cast<double>(bytes) / (1 << 30), took);
    else
      logger()->debug("receiver: faulting in {:.2f} GiB of staging memory {}, in the background",
                      static_cast<double>(bytes) / (1 << 30), why);
  } catch (const std::exception& e) {
    logger()->warn("receiver: staging memory {} not faulted in ahead: {}", why, e.what());
  }
}

Receiver::Receiver(const std::string& backend)
    : Receiver([&] {
        Options o;
        o.backend = backend;
        return o;
      }()) {}

Receiver::~Receiver() {
  try {
    wait_for_device_copies();  // none may still write into memory freed below
  } catch (const std::exception& e) {
    logger()->warn("receiver: waiting for device copies at exit: {}", e.what());
  }
}

void Receiver::drop_pending_patches(const std::string& name) {
  std::erase_if(pending_patches_, [&](const PendingPatch& p) { return p.name == name; });
}

std::size_t Receiver::reserve_pending_bytes(std::size_t n) {
  const std::size_t at = (pending_size_ + 15) / 16 * 16;  // aligned for any element type
  if (pending_capacity_ < at + n) {
    const std::size_t capacity = std::max(at + n, 2 * pending_capacity_);
    std::unique_ptr<unsigned char[]> grown(new unsigned char[capacity]);  // uninitialised
    if (pending_size_ > 0) std::memcpy(grown.get(), pending_bytes_.get(), pending_size_);
    pending_bytes_ = std::move(grown);
    pending_capacity_ = capacity;
  }
  pending_size_ = at + n;
  return at;
}

void Receiver::clear_pending_patches() {
  pending_patches_.clear();
  // The memory is kept for the next round, unless this one kept patches in a small part of it:
  // one large round does not pin its memory for the receiver's life. (Called again at the next
  // start with nothing kept: that says nothing about the size of rounds.)
  if (pending_size_ > 0 && pending_size_ < pending_capacity_ / 4) {
    pending_bytes_.reset();
    pending_capacity_ = 0;
  }
  pending_size_ = 0;
}

void Receiver::wait_for_device_copies() {
  if (options_.device_staging) options_.device_staging->synchronize();
}

void Receiver::discard_staged() {
  // A slot becomes a spare only when no copy still writes into it. If the device cannot say
  // (a sticky error), the slots are dropped instead of reused; the error that led here stands.
  bool reusable = true;
  try {
    wait_for_device_copies();
  } catch (const std::exception& e) {
    logger()->warn("receiver: waiting for device copies: {}; staged memory not reused", e.what());
    reusable = false;
  }
  clear_pending_patches();
  if (reusable)
    while (!staged_.empty()) move_node(staged_.extract(staged_.begin()), spare_);
  else
    for (auto& [name, t] : staged_)  // leaked, not freed under a pending copy
      (void)new std::shared_ptr<unsigned char>(std::move(t.data));
  staged_.clear();
}

Receiver::TensorMap::node_type Receiver::take_slot(const std::string& name, uint64_t nbytes,
                                                   DLDataType dtype) {
  auto spare = spare_.find(name);
  if (spare != spare_.end() && spare->second.nbytes == nbytes) return spare_.extract(spare);
  TensorMap fresh;
  auto node = fresh.extract(fresh.try_emplace(name).first);
  Tensor& slot = node.mapped();
  if (auto* pinned = options_.device_staging.get()) {
    slot.data = {static_cast<unsigned char*>(pinned->allocate_host(nbytes == 0 ? 1 : nbytes)),
                 [pinned](unsigned char* p) { pinned->free_host(p); }};
    slot.nbytes = nbytes;
  } else {
    slot.data = arena_->allocate(nbytes, alignment_of(dtype));
    slot.nbytes = nbytes;
  }
  return node;
}

// What one receive() delivers into: load() copies, destination()/written() hand the backend a
// staging slot to fill in place, load_patches() patches a staged copy. Everything lands in
// staged_, which only finish makes visible; destinations never marked written go back to spares.
class Receiver::RoundLoader final : public Loader {
 public:
  explicit RoundLoader(Receiver& r) : r_(r) {}
  ~RoundLoader() override {
    while (!pending_.empty()) move_node(pending_.extract(pending_.begin()), r_.spare_);
  }

  uint64_t bytes = 0;
  uint64_t written_in_place = 0;

  void load(std::span<const wt_tensor> tensors) override {
    for (const auto& t : tensors)
      check_held(t.name ? t.name : "", t.tensor.dtype, t.tensor.shape, t.tensor.ndim);
    bytes += r_.load(tensors);
  }

  std::optional<DLTensor> destination(const ParamMeta& p) override {
    if (r_.options_.device.device_type != kDLCPU) return std::nullopt;  // staged in host memory
    uint64_t nbytes = 0;
    if (!checked_nbytes(p.shape.data(), static_cast<int32_t>(p.shape.size()), p.dtype, &nbytes))
      throw Error(
          WT_ERR_INVALID_ARGUMENT,
          fmt::format("destination for '{}': a bad shape (negative, or too many bytes)", p.name));
    check_held(p.name, p.dtype, p.shape.data(), static_cast<int32_t>(p.shape.size()));
    // Asked again for the same name: the earlier memory stays valid until receive returns.
    if (auto earlier = pending_.extract(p.name)) superseded_.push_back(std::move(earlier.mapped()));
    auto slot = r_.take_slot(p.name, nbytes, p.dtype);
    slot.mapped().dtype = p.dtype;
    slot.mapped().shape = p.shape;
    Tensor& t = pending_.insert(std::move(slot)).position->second;
    return DLTensor{t.data.get(),
                    {kDLCPU, 0},
                    static_cast<int32_t>(t.shape.size()),
                    t.dtype,
                    t.shape.data(),
                    nullptr,
                    0};
  }

  void written(const std::string& name) override {
    auto node = pending_.extract(name);
    if (!node)
      throw Error(WT_ERR_STATE,
                  fmt::format("written('{}'): no destination was handed out for it", name));
    if (auto old = r_.staged_.extract(name)) move_node(std::move(old), r_.spare_);
    r_.drop_pending_patches(name);  // rewritten after them: they are superseded
    bytes += node.mapped().nbytes;
    ++written_in_place;
    ++r_.written_in_place_;
    r_.staged_.insert(std::move(node));
  }

  void load_patches(std::span<const wt_sparse_patch> patches) override {
    r_.wait_for_device_copies();  // a patch lands on top of what this round already copied
    std::map<std::string, patching::PatchTarget> targets;
    auto current = [&](const std::string& name) -> const Tensor* {
      if (auto s = r_.staged_.find(name); s != r_.staged_.end()) return &s->second;
      if (auto c = r_.committed_.find(name); c != r_.committed_.end()) return &c->second;
      return nullptr;
    };
    const std::vector<patching::PatchForm> forms = patching::check_patch_forms(
        patches, [&](const std::string& name) -> const patching::PatchTarget* {
          const Tensor* t = current(name);
          if (t == nullptr) return nullptr;
          return &(targets[name] = patching::PatchTarget{t->dtype, t->shape});
        });
    // The elements are copied (the patch's memory is the backend's only for this call) on the load
    // threads, and the copies are what is checked and applied: a backend that changes its buffer
    // meanwhile cannot slip an unchecked index in. Nothing of a refused batch is kept.
    struct Rollback {
      Receiver& r;
      std::size_t mark;
      bool keep = false;
      ~Rollback() {
        if (!keep) r.pending_size_ = mark;
      }
    } rollback{r_, r_.pending_size_};
    std::vector<std::pair<std::size_t, std::size_t>> at(forms.size());  // indices, values
    uint64_t total = 0;
    for (std::size_t k = 0; k < forms.size(); ++k) {
      const auto n = static_cast<std::size_t>(forms[k].count);  // < 2^31, checked
      at[k] = {r_.reserve_pending_bytes(4 * n),
               r_.reserve_pending_bytes(n * forms[k].element_size)};
      total += (4 + forms[k].element_size) * n;
    }
    unsigned char* kept = r_.pending_bytes_.get();  // room made: it no longer moves
    std::vector<const int32_t*> indices(forms.size());
    std::vector<IndexScan> scans(forms.size());
    constexpr uint64_t kParallelBytes = uint64_t{1} << 20;  // below: not worth a thread
    parallel_for(forms.size(), total < kParallelBytes ? 1 : r_.load_threads_, [&](std::size_t k) {
      const patching::PatchForm& f = forms[k];
      const auto n = static_cast<std::size_t>(f.count);
      indices[k] = reinterpret_cast<const int32_t*>(kept + at[k].first);  // 16-byte aligned
      if (n == 0) return;
      std::memcpy(kept + at[k].first, f.indices, 4 * n);
      std::memcpy(kept + at[k].second, f.values, n * f.element_size);
      scans[k] = scan_indices(kept + at[k].first, n, f.limit);
    });
    patching::judge_patch_indices(forms, indices, scans);
    rollback.keep = true;
    // A tensor rewritten this round is patched in its staged copy now; the others at finish.
    for (std::size_t k = 0; k < forms.size(); ++k) {
      const patching::PatchForm& f = forms[k];
      bytes += static_cast<uint64_t>(f.count) * f.element_size;
      if (auto staged = r_.staged_.find(f.name); staged != r_.staged_.end())
        patching::apply_patch(indices[k], kept + at[k].second, f.count, f.element_size,
                            staged->second.data.get());
      else
        r_.pending_patches_.push_back({f.name, f.dtype, f.count, at[k].first, at[k].second});
    }
  }

 private:
  // Once the receiver holds a model (a base checkpoint, or a first full round), a round names
  // only tensors it holds, as it holds them, as vLLM's loader insists: a trainer that drifted
  // (renamed, reshaped or recast a parameter) is refused here, not verified against itself.
  void check_held(const std::string& name, DLDataType dtype, const int64_t* shape, int32_t ndim) {
    if (r_.committed_.empty()) return;
    auto it = r_.committed_.find(name);
    if (it == r_.committed_.end())
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("the update names tensor '{}', which the model this receiver holds "
                              "does not have",
                              name));
    const Tensor& held = it->second;
    const std::vector<int64_t> got(shape, shape + std::max(ndim, 0));
    if (!(held.dtype == dtype) || held.shape != got)
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("tensor '{}' arrives as {} {}, but the model this receiver holds "
                              "has it as {} {}",
                              name, torch_name(dtype), fmt::join(got, "x"), torch_name(held.dtype),
                              fmt::join(held.shape, "x")));
  }

  Receiver& r_;
  TensorMap pending_;               // handed out, not yet written
  std::vector<Tensor> superseded_;  // handed out, then asked for again: freed at the end
};

void Receiver::init_weight_transfer_engine(nlohmann::json init_info) {
  std::lock_guard<std::mutex> l(session_mu_);
  if (!init_info.is_object())
    throw Error(WT_ERR_INVALID_ARGUMENT, "init_info must be a JSON object");
  const std::string text = init_info.dump();
  init_info = nullptr;  // the engine parses the text: do not keep two copies alive
  if (engine_ && active_) engine_->abort();
  active_ = false;
  discard_staged();  // a round abandoned by a re-init must never reach a later finish
  {
    std::lock_guard<std::mutex> e(engine_mu_);
    engine_.reset();
  }
  WorkerOptions wopts;
  wopts.device = options_.device;
  wopts.backend_options = options_.backend_options;
  {  // what it holds, so that a backend with a static plan can refuse a disagreement at init
    std::lock_guard<std::mutex> state(state_mu_);
    for (const auto& [name, t] : committed_) wopts.held.push_back({name, t.dtype, t.shape});
  }
  // Device copies are queued on the staging's stream: the worker waits for it before answering.
  if (options_.device_staging) wopts.stream = options_.device_staging->stream();
  std::shared_ptr<WorkerEngine> created = WorkerEngine::create(options_.backend, text, wopts);
  std::lock_guard<std::mutex> e(engine_mu_);
  engine_ = std::move(created);
  logger()->info("receiver: {} worker engine initialised with {}", options_.backend,
                 redacted_json(text));
}

void Receiver::load_base(WeightSource& source) {
  std::lock_guard<std::mutex> l(session_mu_);
  if (active_)
    throw Error(WT_ERR_STATE, "a weight update is active: the base weights load before any round");
  std::vector<wt_tensor> tensors;
  source.begin();
  struct End {
    WeightSource& s;
    ~End() { s.end(); }
  } end{source};
  wt_tensor t{};
  while (source.next(t)) {
    if (t.tensor.device.device_type != kDLCPU)
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("base tensor '{}' is not in host memory", t.name ? t.name : ""));
    tensors.push_back(t);
  }
  discard_staged();
  load(tensors);  // into staged_, as a round does
  uint64_t bytes = 0;
  {
    std::lock_guard<std::mutex> state(state_mu_);
    while (!staged_.empty()) move_node(staged_.extract(staged_.begin()), committed_);
    version_ = "base";
    bytes = committed_bytes_locked();
  }
  // The first round stages a copy of the model beside the base: its memory, ready before it.
  if (!next_round_prepared_) prepare_staging(bytes, true, "for the first round");
  next_round_prepared_ = true;
}

void Receiver::start_weight_update() {
  std::lock_guard<std::mutex> l(session_mu_);
  if (!engine_)
    throw Error(WT_ERR_STATE,
                "weight transfer is not initialised: call init_weight_transfer_engine first");
  if (active_)
    throw Error(WT_ERR_STATE,
                "a weight update is already active. Call finish_weight_update first.");
  discard_staged();
  engine_->start();
  active_ = true;
}

void Receiver::update_weights(nlohmann::json update_info) {
  std::lock_guard<std::mutex> l(session_mu_);
  if (!active_)
    throw Error(WT_ERR_STATE, "start_weight_update must be called before update_weights.");
  try {
    const nlohmann::json* one = &update_info;
    if (update_info.is_array()) {
      if (update_info.size() != static_cast<std::size_t>(world_size()))
        throw Error(
            WT_ERR_INVALID_ARGUMENT,
            fmt::format("update_info is a list of {} per-worker payloads, but this receiver has {} "
                        "worker(s)",
                        update_info.size(), world_size()));
      one = &update_info[0];
    }
    std::string text = one->dump();
    update_info = nullptr;  // the engine parses the text: do not keep two copies alive
    receive(text);
  } catch (...) {
    end_failed_update();
    throw;
  }
}

void Receiver::update_weights_text(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || text[first] != '{') {
    // A list of per-worker payloads, or not an object at all: the checks above say which.
    nlohmann::json parsed;
    try {
      parsed = parse_json(text);
    } catch (const JsonError& e) {
      std::lock_guard<std::mutex> l(session_mu_);
      if (!active_)
        throw Error(WT_ERR_STATE, "start_weight_update must be called before update_weights.");
      end_failed_update();
      throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("update_info: {}", e.what()));
    }
    update_weights(std::move(parsed));
    return;
  }
  std::lock_guard<std::mutex> l(session_mu_);
  if (!active_)
    throw Error(WT_ERR_STATE, "start_weight_update must be called before update_weights.");
  try {
    receive(text);  // the engine parses and checks the object itself
  } catch (...) {
    end_failed_update();
    throw;
  }
}

void Receiver::receive(std::string_view text) {
  const auto t0 = std::chrono::steady_clock::now();
  RoundLoader loader(*this);
  engine_->receive(text, loader);
  logger()->debug("receiver: update loaded {} bytes in {:.3f} s ({} written in place)",
                  loader.bytes,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                  loader.written_in_place);
}

void Receiver::end_failed_update() {
  // vLLM's rule: a failed update ends the session; what this round staged is dropped.
  active_ = false;
  discard_staged();
  try {
    engine_->abort();
  } catch (...) {
  }
}

uint64_t Receiver::load(std::span<const wt_tensor> tensors) {
  uint64_t total = 0;
  std::vector<CopyJob> host_copies;
  std::set<std::string_view> names;
  bool repeated = false;  // a name twice in one batch: copy in order, so the last one wins
  for (const auto& t : tensors) {
    const DLTensor& d = t.tensor;
    const bool on_host = d.device.device_type == kDLCPU || d.device.device_type == kDLCUDAHost;
    if (!on_host && !options_.device_staging)
      throw Error(
          WT_ERR_UNSUPPORTED,
          fmt::format("tensor '{}' arrived in device memory and this receiver has no device copy",
                      t.name));
    uint64_t nbytes = 0;
    if (d.ndim < 0 || (d.ndim > 0 && d.shape == nullptr) ||
        !checked_nbytes(d.shape, d.ndim, d.dtype, &nbytes))
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("tensor '{}' has a bad shape (negative, or too many bytes)", t.name));
    repeated |= !names.insert(t.name).second;
    auto node = take_slot(t.name, nbytes, d.dtype);
    Tensor& slot = node.mapped();
    slot.dtype = d.dtype;
    slot.shape.assign(d.shape, d.shape + d.ndim);
    if (on_host)
      host_copies.push_back(
          {slot.data.get(), static_cast<const unsigned char*>(d.data) + d.byte_offset, nbytes});
    else if (nbytes > 0)
      options_.device_staging->copy_to_host(slot.data.get(), d, nbytes);
    if (auto old = staged_.extract(t.name)) move_node(std::move(old), spare_);
    drop_pending_patches(t.name);
    staged_.insert(std::move(node));
    total += nbytes;
  }
  // The slots stay alive until the copies are done: replaced ones wait in spare_. A slot recycled
  // from a spare may still be the target of a queued device copy: those land first.
  if (!host_copies.empty()) wait_for_device_copies();
  // Guarded: another process can truncate the shared-memory file being read (SIGBUS otherwise).
  if (auto fault = guarded_parallel_copy(host_copies, repeated ? 1 : load_threads_))
    throw Error(WT_ERR_SYSTEM, fault->message(tensors));
  return total;
}

void Receiver::finish_weight_update(const std::optional<std::string>& weight_version) {
  std::lock_guard<std::mutex> l(session_mu_);
  finish_engine_locked();
  hand_committed(commit_locked(weight_version));
}

void Receiver::finish_engine() {
  std::lock_guard<std::mutex> l(session_mu_);
  finish_engine_locked();
}

void Receiver::commit_finished(const std::optional<std::string>& weight_version) {
  std::lock_guard<std::mutex> l(session_mu_);
  hand_committed(commit_locked(weight_version));
}

void Receiver::hand_committed(const std::vector<std::string>& names) {
  if (!options_.on_commit || names.empty()) return;
  std::vector<wt_tensor> views;
  views.reserve(names.size());
  {
    // The map is read under the state lock; the memory stays put while the session lock is held
    // (only a round, or load_base, changes it), so the call runs without the state lock: the
    // engine may read checksums() meanwhile.
    std::lock_guard<std::mutex> state(state_mu_);
    for (const std::string& name : names) {
      const auto it = committed_.find(name);
      if (it == committed_.end()) continue;
      const Tensor& t = it->second;
      wt_tensor v{};
      v.name = it->first.c_str();
      v.tensor = DLTensor{t.data.get(),
                          DLDevice{kDLCPU, 0},
                          static_cast<int32_t>(t.shape.size()),
                          t.dtype,
                          const_cast<int64_t*>(t.shape.data()),
                          nullptr,
                          0};
      views.push_back(v);
    }
  }
  options_.on_commit(views);
}

void Receiver::drop_finished() {
  std::lock_guard<std::mutex> l(session_mu_);
  if (!active_) discard_staged();
}

void Receiver::finish_engine_locked() {
  if (!active_)
    throw Error(WT_ERR_STATE, "no weight update is active: call start_weight_update first.");
  active_ = false;
  try {
    engine_->finish();
    wait_for_device_copies();  // the round's one synchronisation
  } catch (...) {
    discard_staged();
    throw;
  }
}

std::vector<std::string> Receiver::commit_locked(const std::optional<std::string>& weight_version) {
  std::lock_guard<std::mutex> state(state_mu_);
  std::vector<std::string> names;
  while (!staged_.empty()) {
    auto node = staged_.extract(staged_.begin());
    names.push_back(node.key());
    if (auto old = committed_.extract(node.key())) move_node(std::move(old), spare_);
    committed_.insert(std::move(node));
  }
  // Validated when they arrived (against these tensors' shape and dtype, which no round changes
  // without rewriting them, and that drops them): applying cannot fail.
  // Scattered writes are memory-latency bound: tensors are spread over the load threads (one
  // tensor's patches stay on one thread, in order).
  std::map<std::string, std::vector<const PendingPatch*>> by_tensor;
  for (const auto& p : pending_patches_) by_tensor[p.name].push_back(&p);
  for (const auto& [name, list] : by_tensor)
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  std::vector<std::pair<const std::vector<const PendingPatch*>*, unsigned char*>> work;
  for (const auto& [name, list] : by_tensor)
    work.emplace_back(&list, committed_.at(name).data.get());
  parallel_for(work.size(), load_threads_, [&](std::size_t k) {
    for (const PendingPatch* p : *work[k].first)
      patching::apply_patch(reinterpret_cast<const int32_t*>(pending_bytes_.get() + p->indices_at),
                          pending_bytes_.get() + p->values_at, p->count, element_size(p->dtype),
                          work[k].second);
  });
  clear_pending_patches();
  if (weight_version) version_ = weight_version;
  ++rounds_;
  // The model's first commit: the next round stages a second copy, in memory nobody has touched
  // yet. It is faulted in now, in the background, while the trainer trains.
  if (!next_round_prepared_ && spare_.empty()) {
    prepare_staging(committed_bytes_locked(), false, "for the next round");
    next_round_prepared_ = true;
  }
  return names;
}

void Receiver::abort_update() noexcept {
  if (!active_) return;
  std::shared_ptr<WorkerEngine> engine;
  {
    std::lock_guard<std::mutex> e(engine_mu_);
    engine = engine_;
  }
  if (engine) {
    try {
      engine->abort();  // safe from any thread (ABI): a receive in progress returns ABORTED
    } catch (...) {
    }
  }
}

void Receiver::end_weight_update(const std::string& reason) {
  abort_update();
  std::lock_guard<std::mutex> l(session_mu_);
  if (!active_) return;
  active_ = false;
  discard_staged();
  try {
    engine_->abort();
  } catch (...) {
  }
  logger()->warn("receiver: the trainer ended the weight update{}{}", reason.empty() ? "" : ": ",
                 reason);
}

std::optional<std::string> Receiver::weight_version() const {
  std::lock_guard<std::mutex> l(state_mu_);
  return version_;
}

void Receiver::set_weight_version(const std::string& version) {
  std::lock_guard<std::mutex> l(state_mu_);
  version_ = version;
}

bool Receiver::session_active() const {
  return active_.load();
}

std::map<std::string, std::string> Receiver::checksums() const {
  std::lock_guard<std::mutex> l(state_mu_);
  std::map<std::string, std::string> out;
  for (const auto& [name, t] : committed_) out[name] = checksum_bytes(t.data.get(), t.nbytes);
  return out;
}

std::vector<std::string> Receiver::names() const {
  std::lock_guard<std::mutex> l(state_mu_);
  std::vector<std::string> out;
  for (const auto& [name, t] : committed_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::vector<unsigned char>> Receiver::bytes_of(const std::string& name) const {
  std::lock_guard<std::mutex> l(state_mu_);
  auto it = committed_.find(name);
  if (it == committed_.end()) return std::nullopt;
  return std::vector<unsigned char>(it->second.data.get(),
                                    it->second.data.get() + it->second.nbytes);
}

std::optional<Receiver::TensorCopy> Receiver::copy_of(const std::string& name) const {
  std::lock_guard<std::mutex> l(state_mu_);
  auto it = committed_.find(name);
  if (it == committed_.end()) return std::nullopt;
  const Tensor& t = it->second;
  return TensorCopy{t.dtype, t.shape,
                    std::vector<unsigned char>(t.data.get(), t.data.get() + t.nbytes)};
}

uint64_t Receiver::committed_bytes() const {
  std::lock_guard<std::mutex> l(state_mu_);
  return committed_bytes_locked();
}

uint64_t Receiver::rounds_finished() const {
  std::lock_guard<std::mutex> l(state_mu_);
  return rounds_;
}

namespace {

nlohmann::json parse_payload(std::string_view text, const char* what) {
  try {
    return parse_json(text);
  } catch (const JsonError& e) {
    throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("{}: {}", what, e.what()));
  }
}

}  // namespace

void InProcessClient::init_weight_transfer_engine(std::string_view j) {
  r_.init_weight_transfer_engine(parse_payload(j, "init_info"));
}
void InProcessClient::start_weight_update() {
  r_.start_weight_update();
}
void InProcessClient::update_weights(std::string_view j) {
  r_.update_weights_text(j);
}
void InProcessClient::finish_weight_update(const std::optional<std::string>& v) {
  r_.finish_weight_update(v);
}
void InProcessClient::end_weight_update(std::string_view reason) {
  r_.end_weight_update(std::string(reason));
}

}  // namespace wt
