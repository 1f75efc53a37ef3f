// The checks that move weights: the plugin's trainer engine here, its worker engine in a `wt serve`
// child process started on the same file, talking through the real HTTP control plane. The client
// between them is the harness's own, so it can hold a call back (for the abort check).
#include "check_context.hpp"

#include "../subprocess.hpp"
#include "../training_step.hpp"

#include <wt/checksum.hpp>
#include <wt/error.hpp>
#include <wt/sdk/tensor_layout.hpp>
#include <wt/services/checkpoint_gen.hpp>
#include <wt/services/fan_out_client.hpp>
#include <wt/services/http_client.hpp>
#include <wt/wt.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <linux/tcp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

namespace wt::cli::conformance {

using Clock = std::chrono::steady_clock;
using Checksums = std::map<std::string, std::string>;

namespace {

constexpr auto kAbortDeadline = std::chrono::seconds(5);
constexpr double kChangedFraction = 0.01;

// The trainer's view of the worker: HTTP to the `wt serve` child, with update_weights optionally
// held back. A held call is released by abort_calls() (what the host does when it aborts an
// engine) only when it blocks the thread that runs send_weights: then the plugin cannot return
// without the host's help. A call held on a side thread of the plugin is released only by
// release(), after the abort check has seen whether the plugin's own abort() ended the round.
class HarnessClient : public Client {
 public:
  explicit HarnessClient(const std::string& url,
                         std::chrono::milliseconds timeout = std::chrono::seconds(60))
      : http_(url, options(timeout)) {}
  void init_weight_transfer_engine(std::string_view json) override {
    http_.init_weight_transfer_engine(json);
  }
  void start_weight_update() override { http_.start_weight_update(); }
  void update_weights(std::string_view json) override {
    InFlight mark(*this);
    {
      std::unique_lock<std::mutex> l(mu_);
      if (refuse_updates_)
        throw Error(WT_ERR_REMOTE,
                    "wt conformance refused this update_weights call before it reached the "
                    "worker, on purpose");
      if (hold_) {
        held_ = true;
        held_thread_ = std::this_thread::get_id();
        cv_.notify_all();
        cv_.wait_for(l, std::chrono::seconds(120), [&] { return released_; });
        throw Error(WT_ERR_ABORTED, "update_weights was held by the harness until the abort");
      }
    }
    http_.update_weights(json);
  }
  void finish_weight_update(const std::optional<std::string>& v) override {
    http_.finish_weight_update(v);
  }
  void end_weight_update(std::string_view reason) override { http_.end_weight_update(reason); }
  void abort_calls() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (held_ && held_thread_ == sender_thread_) released_ = true;
    }
    cv_.notify_all();
  }
  // Every update_weights call fails here, after start_weight_update reached the worker: the
  // round is open there, and only the trainer's end_weight_update closes it.
  void refuse_updates() {
    std::lock_guard<std::mutex> l(mu_);
    refuse_updates_ = true;
  }
  void hold_updates(std::thread::id sender_thread) {
    std::lock_guard<std::mutex> l(mu_);
    hold_ = true;
    sender_thread_ = sender_thread;
  }
  // Whether the held call blocks send_weights' own thread (known once held).
  bool held_on_sender_thread() {
    std::lock_guard<std::mutex> l(mu_);
    return held_ && held_thread_ == sender_thread_;
  }
  bool wait_held(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, d, [&] { return held_; });
  }
  void release() {
    {
      std::lock_guard<std::mutex> l(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  // update_weights calls in progress, and when the last one began or ended.
  int updates_in_flight() {
    std::lock_guard<std::mutex> l(mu_);
    return in_flight_;
  }
  Clock::time_point last_update_change() {
    std::lock_guard<std::mutex> l(mu_);
    return changed_;
  }

 private:
  struct InFlight {
    HarnessClient& c;
    explicit InFlight(HarnessClient& h) : c(h) {
      std::lock_guard<std::mutex> l(c.mu_);
      ++c.in_flight_;
      c.changed_ = Clock::now();
    }
    ~InFlight() {
      std::lock_guard<std::mutex> l(c.mu_);
      --c.in_flight_;
      c.changed_ = Clock::now();
    }
  };
  int in_flight_ = 0;
  Clock::time_point changed_ = Clock::now();
  static HttpClient::Options options(std::chrono::milliseconds timeout) {
    HttpClient::Options o;
    o.timeout = timeout;
    return o;
  }
  HttpClient http_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false, held_ = false, released_ = false, refuse_updates_ = false;
  std::thread::id held_thread_, sender_thread_;
};

// The checkpoint, passed through, counting what a pass has handed out: the sources below change
// one thing about it each.
class CountingSource : public WeightSource {
 public:
  explicit CountingSource(WeightSource& inner) : inner_(inner) {}
  const std::vector<ParamMeta>& metadata() override { return inner_.metadata(); }
  void begin() override {
    inner_.begin();
    given_ = 0;
  }
  bool next(wt_tensor& out) override {
    ++given_;
    return inner_.next(out);
  }
  void end() override { inner_.end(); }

 protected:
  WeightSource& inner_;
  std::size_t given_ = 0;  // tensors handed out this pass
};

// A source that declares every tensor but stops one short: a round the engine must refuse.
class TruncatedSource : public CountingSource {
 public:
  using CountingSource::CountingSource;
  bool next(wt_tensor& out) override {
    return given_ + 1 < inner_.metadata().size() && CountingSource::next(out);
  }
};

// A source that fails in the middle of a pass (its next() reports an error after half the
// tensors): a trainer-side failure inside a round the plugin has usually started.
class FailingSource : public CountingSource {
 public:
  using CountingSource::CountingSource;
  bool next(wt_tensor& out) override {
    if (given_ >= inner_.metadata().size() / 2)
      throw Error(WT_ERR_SYSTEM, "wt conformance: this weight source fails halfway, on purpose");
    return CountingSource::next(out);
  }
};

// A source that yields its first tensor, then holds the second back until released (or 30 s):
// a round whose transfer has begun but cannot finish, so the worker's receive waits.
class HeldSource : public CountingSource {
 public:
  using CountingSource::CountingSource;
  bool next(wt_tensor& out) override {
    if (given_ == 1) {
      std::unique_lock<std::mutex> l(mu_);
      holding_ = true;
      cv_.notify_all();
      cv_.wait_for(l, std::chrono::seconds(30), [&] { return released_; });
    }
    return CountingSource::next(out);
  }
  bool holding() {
    std::lock_guard<std::mutex> l(mu_);
    return holding_;
  }
  void release() {
    {
      std::lock_guard<std::mutex> l(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool holding_ = false, released_ = false;
};

// A streaming source that hands out every tensor in one reused buffer: a plugin that reads a
// tensor after asking for the next one reads the next one's bytes, and the round fails to verify.
class ReusedBufferSource : public WeightSource {
 public:
  explicit ReusedBufferSource(WeightSource& inner) : inner_(inner) {}
  bool prefers_streaming() const override { return true; }
  const std::vector<ParamMeta>& metadata() override { return inner_.metadata(); }
  void begin() override { inner_.begin(); }
  bool next(wt_tensor& out) override {
    if (!inner_.next(out)) return false;
    uint64_t n = 0;
    checked_nbytes(out.tensor.shape, out.tensor.ndim, out.tensor.dtype, &n);
    if (buffer_.size() < n) buffer_.resize(n);
    std::fill(buffer_.begin(), buffer_.end(), 0xa5);  // nothing of the last tensor stays
    copy_to_contiguous(buffer_.data(), out.tensor, n);
    out.tensor.data = buffer_.data();
    out.tensor.byte_offset = 0;
    out.tensor.strides = nullptr;
    return true;
  }
  void end() override { inner_.end(); }

 private:
  WeightSource& inner_;
  std::vector<unsigned char> buffer_;
};

// How far a round must outgrow the socket buffers to be broken in the middle of a tensor: the most
// a TCP send buffer and a receive buffer may grow to together (the kernel's autotuning maximum, or
// the larger one a socket may set).
uint64_t socket_buffer_bytes() {
  auto read_max = [](const char* path, int field) {
    std::ifstream f(path);
    uint64_t v[3] = {0, 0, 0};
    for (int i = 0; i <= field && (f >> v[i]); ++i) {
    }
    return v[field];
  };
  return std::max(read_max("/proc/sys/net/ipv4/tcp_wmem", 2),
                  read_max("/proc/sys/net/core/wmem_max", 0)) +
         std::max(read_max("/proc/sys/net/ipv4/tcp_rmem", 2),
                  read_max("/proc/sys/net/core/rmem_max", 0));
}

// Bytes this process's TCP sockets sent that their peers acknowledged, all together (the
// kernel's count, TCP_INFO): how far a round's data plane has moved.
uint64_t tcp_bytes_acked() {
  uint64_t total = 0;
  for (const auto& name : list_dir("/proc/self/fd")) {
    const int fd = std::atoi(name.c_str());
    tcp_info info{};
    socklen_t len = sizeof info;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 &&
        len >= offsetof(tcp_info, tcpi_bytes_acked) + sizeof info.tcpi_bytes_acked)
      total += info.tcpi_bytes_acked;
  }
  return total;
}

// The last `n` characters of a process's output, for a message.
std::string tail_of(const std::string& out, std::size_t n) {
  return out.size() <= n ? out : "..." + out.substr(out.size() - n);
}

// Whether the worker's update session at `url` is still open (`wt serve`'s /health says).
bool session_open_at(const std::string& url) {
  return HttpClient(url).get("/health").value("update_active", true);
}

// A model of two bf16 tensors of `tensor_bytes` each.
ModelLayout large_layout(uint64_t tensor_bytes) {
  ModelLayout l;
  l.name = "conformance-large";
  l.description = "two large tensors";
  constexpr int64_t kCols = 4096;
  for (int i = 0; i < 2; ++i) {
    ParamMeta p;
    p.name = fmt::format("large.{}.weight", i);
    p.dtype = {kDLBfloat, 16, 1};
    p.shape = {static_cast<int64_t>(tensor_bytes / (2 * kCols)), kCols};
    l.params.push_back(std::move(p));
  }
  return l;
}

// The checkpoint with every byte inverted (a round that differs from the last one everywhere), in
// memory of its own.
class InvertedSource : public WeightSource {
 public:
  explicit InvertedSource(WeightSource& inner) : meta_(inner.metadata()) {
    inner.begin();
    for (wt_tensor t{}; inner.next(t); t = wt_tensor{}) {
      Copy c;
      uint64_t n = 0;
      checked_nbytes(t.tensor.shape, t.tensor.ndim, t.tensor.dtype, &n);
      c.data.resize(n);
      copy_to_contiguous(c.data.data(), t.tensor, n);
      for (auto& b : c.data) b = static_cast<unsigned char>(~b);
      c.name = t.name != nullptr ? t.name : "";
      c.shape.assign(t.tensor.shape, t.tensor.shape + t.tensor.ndim);
      c.tensor = t;
      copies_.push_back(std::move(c));
    }
    inner.end();
  }
  const std::vector<ParamMeta>& metadata() override { return meta_; }
  void begin() override { next_ = 0; }
  bool next(wt_tensor& out) override {
    if (next_ >= copies_.size()) return false;
    Copy& c = copies_[next_++];
    out = c.tensor;
    out.name = c.name.c_str();
    out.tensor.data = c.data.data();
    out.tensor.byte_offset = 0;
    out.tensor.strides = nullptr;
    out.tensor.shape = c.shape.data();
    return true;
  }
  void end() override {}
  // What a worker holds after a round of it.
  Checksums checksums() const {
    Checksums out;
    for (const auto& c : copies_) out[c.name] = checksum_bytes(c.data.data(), c.data.size());
    return out;
  }

 private:
  struct Copy {
    std::string name;
    std::vector<int64_t> shape;
    wt_tensor tensor{};
    std::vector<unsigned char> data;
  };
  std::vector<ParamMeta> meta_;
  std::vector<Copy> copies_;
  std::size_t next_ = 0;
};

// What a process holds: open descriptors (by number, with what they point at) and threads.
struct Holdings {
  std::map<int, std::string> fds;
  int threads = -1;
};
Holdings holdings(pid_t pid) {
  Holdings h;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  for (const auto& name : list_dir(dir)) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(dir + "/" + name, ec);
    h.fds[std::atoi(name.c_str())] = ec ? "?" : target.string();
  }
  h.threads = threads(pid);
  return h;
}

}  // namespace

// The worker side and the trainer's data, alive from the loopback check to the last one.
struct Loopback {
  std::unique_ptr<Child> server;
  std::string url;
  // Reads the server's output as it comes (a chatty worker must not block on a full pipe) and
  // copies it to this process's log, which `wt conformance` shows when a check fails.
  std::thread drainer;
  std::atomic<bool> stop{false};
  // An abort check that left a send_weights blocked: what it reads must not change under it.
  bool poisoned = false;

  ~Loopback() {
    stop = true;
    if (drainer.joinable()) drainer.join();
  }
  void start_draining() {
    drainer = std::thread([this] {
      std::size_t shown = 0;
      while (!stop) {
        server->drain();
        const std::string& out = server->output();
        if (out.size() > shown) {
          std::fwrite(out.data() + shown, 1, out.size() - shown, stderr);
          shown = out.size();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }
  // Whether the worker's update session is still open (`wt serve`'s /health says).
  bool session_open() { return session_open_at(url); }
  // What `leftovers` compares against: taken when the loopback starts (this process, before any
  // trainer; the directories) and after its first verified round (the worker's process, whose
  // engine then exists).
  struct Baseline {
    Holdings trainer, worker;
    bool worker_taken = false;
    std::set<std::string> tmp, shm, cwd;
  } baseline;
  std::vector<std::string> server_args;  // how `wt serve` was started, for a second worker
  std::vector<std::string> checkpoint_files;
  int worker_world_size = 1;
  bool sparse = false;
  std::unique_ptr<SafetensorsSource> checkpoint;
  std::vector<std::vector<unsigned char>> previous;  // sparse: what the worker holds
  Checksums verified;                                // the worker's weights after the last round
  int round = 0;

  // One trainer engine and the client it uses (the engine is destroyed first).
  struct Trainer {
    std::unique_ptr<HarnessClient> client;
    std::unique_ptr<TrainerEngine> engine;
    ~Trainer() { engine.reset(); }
  };

  // `source`: what a dense trainer sends (default: the checkpoint).
  // `to`: another worker's URL (default: the loopback's), reached with `timeout`.
  std::unique_ptr<Trainer> trainer(Context& ctx, WeightSource* source = nullptr,
                                   const std::string& to = "",
                                   std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    auto t = std::make_unique<Trainer>();
    t->client = std::make_unique<HarnessClient>(to.empty() ? url : to, timeout);
    auto fields = init_fields_for_trainer(ctx, worker_world_size);
    try {
      t->engine =
          trainer_init(InitInfo::from_object(fields, "the loopback's init info"), *t->client,
                       sparse   ? nullptr
                       : source ? source
                                : checkpoint.get());
    } catch (const Error& e) {
      fail("trainer_init with {} failed: {}", fields.dump(), e.what());
    }
    return t;
  }

  Checksums expected() {
    Checksums out;
    const auto& meta = checkpoint->metadata();
    for (std::size_t i = 0; i < checkpoint->size(); ++i) {
      auto b = checkpoint->bytes(i);
      out[meta[i].name] = checksum_bytes(b.data(), b.size());
    }
    return out;
  }
  Checksums worker() { return HttpClient(url).weight_checksums(); }

  // Where the worker's weights differ from `want`, in words ("" when they do not).
  std::string differences(const Checksums& want) {
    Checksums have = worker();
    std::vector<std::string> bad;
    for (const auto& [name, sum] : want) {
      auto it = have.find(name);
      if (it == have.end() || it->second != sum) bad.push_back(name);
    }
    if (bad.empty()) return "";
    return fmt::format("{} of {} tensors differ on the worker, first '{}'", bad.size(), want.size(),
                       bad.front());
  }

  // The next training step, and what a round sends for it.
  SendOptions next_round(std::vector<Delta>& deltas) {
    perturb(*checkpoint, kChangedFraction, 1000003ULL * 7 + static_cast<uint64_t>(round));
    SendOptions o;
    o.weight_version = fmt::format("conformance-{}", round++);
    if (sparse) {
      deltas = deltas_against(*checkpoint, previous);
      for (const auto& d : deltas) o.patches.push_back(d.patch());
    }
    return o;
  }
  // Sends one round through `t` and checks every byte on the worker.
  void verified_round(Trainer& t, const std::string& what) {
    std::vector<Delta> deltas;
    SendOptions o = next_round(deltas);
    auto before = previous;
    try {
      t.engine->send_weights(o);
    } catch (const Error& e) {
      previous = std::move(before);
      fail("{}: send_weights failed: {}", what, e.what());
    }
    Checksums want = expected();
    if (auto d = differences(want); !d.empty()) fail("{}: {}", what, d);
    verified = std::move(want);
  }
};

pid_t loopback_server_pid(const Loopback& lb) {
  return lb.server ? lb.server->pid() : -1;
}

namespace {

Loopback& loopback(Context& ctx) {
  if (!ctx.loopback) throw Skipped("the loopback did not start");
  return *ctx.loopback;
}

// Another worker beside the loopback's: a `wt serve` started as the loopback's was. `which`
// names it in the failure ("a second worker").
std::pair<std::unique_ptr<Child>, std::string> another_worker(Context& ctx, const Loopback& lb,
                                                              const std::string& which) {
  try {
    return start_server(ctx.options.wt_program, lb.server_args);
  } catch (const std::exception& e) {
    fail("{} (wt serve --plugin {}) did not start: {}", which, ctx.options.path, e.what());
  }
}

std::string seconds(Clock::duration d) {
  return fmt::format("{:.2f} s", std::chrono::duration<double>(d).count());
}

}  // namespace

void check_loopback(Context& ctx, std::string& detail) {
  const uint64_t c = ctx.plugin->capabilities();
  if (!(c & WT_CAP_TRAINER) || !(c & WT_CAP_WORKER))
    throw Skipped("needs both a trainer and a worker engine in the plugin");
  if (!(c & WT_CAP_HOST_MEMORY)) throw Skipped("the loopback moves host memory; CUDA only here");
  auto lb = std::make_shared<Loopback>();
  lb->sparse = (c & WT_CAP_SPARSE) != 0;
  // A small model (a tiny decoder layout, bf16): the same checkpoint on both sides.
  const std::string model = ctx.options.work_dir + "/model";
  auto files = write_synthetic_checkpoint(model, model_layout("tiny", {kDLBfloat, 16, 1}), 7);
  lb->checkpoint_files = files;
  lb->checkpoint =
      std::make_unique<SafetensorsSource>(files, SafetensorsSource::Memory::private_copy_on_write);
  std::vector<std::string> args{"--plugin", ctx.options.path};
  if (!ctx.options.worker_options.empty()) {
    nlohmann::json cfg = ctx.options.worker_options;
    cfg["backend"] = ctx.backend;
    args.insert(args.end(), {"--weight-transfer-config", cfg.dump()});
  }
  // A delta backend's worker starts from the base checkpoint, as an inference server would.
  if (lb->sparse) {
    args.insert(args.end(), {"--load-checkpoint", model});
    lb->previous = snapshot(*lb->checkpoint);
  }
  lb->server_args = args;
  try {
    std::tie(lb->server, lb->url) = start_server(ctx.options.wt_program, args);
  } catch (const std::exception& e) {
    fail("the worker side (wt serve --plugin {}) did not start: {}", ctx.options.path, e.what());
  }
  lb->worker_world_size = HttpClient(lb->url).get("/get_world_size").value("world_size", 1);
  ctx.loopback = lb;
  lb->start_draining();
  // What `leftovers` compares against. The first round runs on a trainer of its own, destroyed
  // before the baseline is taken again: state a process keeps for its lifetime once it used the
  // plugin (a liveness file, a lazily made pool) is not a leak; what each engine or round leaves
  // is. If that round fails, the baseline from before it stands.
  auto take_baseline = [&] {
    lb->baseline.trainer = holdings(::getpid());
    lb->baseline.tmp = list_dir(ctx.options.work_dir + "/tmp");
    lb->baseline.cwd = list_dir(ctx.options.work_dir + "/cwd");
    lb->baseline.shm = list_dir("/dev/shm");
  };
  take_baseline();
  auto start = Clock::now();
  {
    auto first = lb->trainer(ctx);
    lb->verified_round(*first, "round 1");
  }
  take_baseline();
  lb->baseline.worker = holdings(lb->server->pid());
  lb->baseline.worker_taken = true;
  auto t = lb->trainer(ctx);
  for (int r = 1; r < ctx.options.rounds; ++r)
    lb->verified_round(*t, fmt::format("round {}", r + 1));
  detail = fmt::format(
      "{} rounds of {} tensors ({} bytes{}) verified on the worker in {} (the "
      "first on a trainer of its own)",
      ctx.options.rounds, lb->checkpoint->size(), lb->checkpoint->total_bytes(),
      lb->sparse ? ", sent as 1% patches" : "", seconds(Clock::now() - start));
}

// One trainer feeding two workers at once: a second `wt serve` beside the loopback's, reached
// through wt's FanOutClient as `wt launch` reaches several receivers (every call to both
// concurrently, each its own ranks), one round verified on both.
void check_fan_out(Context& ctx, std::string& detail) {
  Loopback& lb = loopback(ctx);
  if (lb.verified.empty()) throw Skipped("no round was verified");
  if (lb.sparse) {
    // A second worker would start from the base checkpoint, not from the patched weights the
    // loopback's holds, so one round of patches cannot be right for both.
    detail = "a delta backend's workers must share their base: not checked with a fresh second";
    return;
  }
  auto [second, url2] = another_worker(ctx, lb, "a second worker");
  const int world2 = HttpClient(url2).world_size();
  HarnessClient first_client(lb.url), second_client(url2);
  FanOutClient both(
      {{&first_client, lb.worker_world_size, lb.url}, {&second_client, world2, url2}});
  const nlohmann::json fields = init_fields_for_trainer(ctx, both.world_size());
  std::unique_ptr<TrainerEngine> engine;
  try {
    engine = trainer_init(InitInfo::from_object(fields, "the fan-out's init info"), both,
                          lb.checkpoint.get());
  } catch (const Error& e) {
    fail("trainer_init with {} for two workers ({} and {}) failed: {}", fields.dump(), lb.url, url2,
         e.what());
  }
  std::vector<Delta> deltas;
  SendOptions o = lb.next_round(deltas);
  const auto t0 = Clock::now();
  try {
    engine->send_weights(o);
  } catch (const Error& e) {
    lb.verified.clear();  // the loopback's worker may hold some of this round: no baseline left
    fail("a round to two workers at once failed: {}", e.what());
  }
  const auto took = Clock::now() - t0;
  const Checksums want = lb.expected();
  for (const std::string& url : {lb.url, url2}) {
    const Checksums have = HttpClient(url).weight_checksums();
    std::size_t wrong = 0;
    std::string first;
    for (const auto& [name, sum] : want)
      if (auto it = have.find(name); it == have.end() || it->second != sum)
        if (wrong++ == 0) first = name;
    if (wrong > 0) lb.verified.clear();  // no baseline left for the checks after this one
    if (wrong > 0)
      fail(
          "after a round to two workers at once, {} of {} tensors differ on the worker at {}, "
          "first '{}'",
          wrong, want.size(), url, first);
  }
  lb.verified = want;
  engine.reset();
  detail = fmt::format(
      "one round to two workers at once ({} worker rank(s) in all), both "
      "verified, in {}",
      both.world_size(), seconds(took));
}

void check_streaming_source(Context& ctx, std::string& detail) {
  Loopback& lb = loopback(ctx);
  if (lb.sparse) {
    detail = "a delta backend takes no weight source";
    return;
  }
  ReusedBufferSource source(*lb.checkpoint);
  auto t = lb.trainer(ctx, &source);
  if (!(ctx.plugin->capabilities() & WT_CAP_STREAMING_SOURCE) || ctx.abi < 2) {
    if (source.streaming())
      fail("the host streams a source to a plugin that does not declare WT_CAP_STREAMING_SOURCE");
    detail = "does not declare WT_CAP_STREAMING_SOURCE: the host keeps every tensor until end()";
    return;
  }
  if (!source.streaming())
    fail("trainer_init did not stream a source that asks for it to this plugin");
  lb.verified_round(*t, "a round from a source that reuses one buffer for every tensor");
  detail = fmt::format("{} tensors handed out in one reused buffer arrived exact",
                       lb.checkpoint->size());
}

void check_rejected_update(Context& ctx, std::string& detail) {
  Loopback& lb = loopback(ctx);
  if (lb.verified.empty()) throw Skipped("no round was verified");
  TruncatedSource truncated(*lb.checkpoint);
  auto t = lb.trainer(ctx, &truncated);
  std::vector<Delta> deltas;
  auto before = lb.previous;
  SendOptions o = lb.next_round(deltas);
  std::string what;
  try {
    if (lb.sparse) {
      // One bad patch among good ones: an index one past the end of its tensor.
      Delta bad = deltas.front();
      uint64_t numel = 1;
      for (auto d : bad.full_shape) numel *= static_cast<uint64_t>(d);
      bad.indices.back() = static_cast<int32_t>(numel);
      o.patches.back() = bad.patch();
      what = fmt::format("a round whose last patch has index {} in '{}' ({} elements)", numel,
                         bad.name, numel);
      t->engine->send_weights(o);
    } else {
      what = "a source that declares every tensor but yields one fewer";
      t->engine->send_weights(o);
    }
    fail("send_weights accepted {}", what);
  } catch (const Error& e) {
    detail = fmt::format("{}: refused ({})", what, status_name(e.code()));
  }
  lb.previous = std::move(before);
  if (auto d = lb.differences(lb.verified); !d.empty())
    fail("after the refused round ({}), {}", what, d);
  if (lb.session_open())
    fail(
        "after the refused round ({}) the worker's update session is still open: a trainer that "
        "fails a round it started must end it with client->end_weight_update",
        what);
  detail += "; the worker's weights are unchanged and its session ended";
  // Failures of the trainer's side inside a round it started: its weight source fails halfway
  // (dense backends), or its update call fails before reaching the worker (every backend). The
  // round fails; whatever it opened on the worker is ended (end_weight_update), weights unchanged.
  auto refused_inside = [&](const std::string& how, WeightSource* source, bool refuse) {
    auto f = lb.trainer(ctx, source);
    if (refuse) f->client->refuse_updates();
    auto kept = lb.previous;
    SendOptions round = lb.next_round(deltas);
    try {
      f->engine->send_weights(round);
      fail("send_weights succeeded although {}", how);
    } catch (const Error&) {
    }
    lb.previous = std::move(kept);
    if (auto d = lb.differences(lb.verified); !d.empty())
      fail("after a round in which {}, {}", how, d);
    if (lb.session_open())
      fail(
          "after a round in which {}, the worker's update session is still open: a trainer that "
          "fails a round it started must end it with client->end_weight_update "
          "(docs/plugin-authoring.md, section 3)",
          how);
  };
  FailingSource failing(*lb.checkpoint);
  if (!lb.sparse) refused_inside("its weight source failed halfway", &failing, false);
  refused_inside("its update_weights call failed", lb.sparse ? nullptr : lb.checkpoint.get(), true);
  detail += fmt::format(
      "; a source failing halfway{} and a failed update call: refused, the "
      "session ended",
      lb.sparse ? " (n/a: patches)" : "");
}

void check_abort(Context& ctx, std::string& detail) {
  Loopback& lb = loopback(ctx);
  if (lb.verified.empty()) throw Skipped("no round was verified");
  // Everything the sending thread uses, owned with it: a send_weights that never returns keeps it
  // alive instead of reading freed memory.
  struct Round {
    std::unique_ptr<Loopback::Trainer> trainer;
    std::vector<Delta> deltas;
    SendOptions options;
    std::promise<std::pair<wt_status, std::string>> done;
  };
  auto round = std::make_shared<Round>();
  round->trainer = lb.trainer(ctx);
  auto before = lb.previous;
  round->options = lb.next_round(round->deltas);
  auto result = round->done.get_future();
  HarnessClient& client = *round->trainer->client;
  std::promise<std::thread::id> started;
  auto sender_id = started.get_future();
  std::promise<void> armed;
  std::shared_future<void> go = armed.get_future().share();
  std::thread([round, &started, go]() {
    started.set_value(std::this_thread::get_id());
    go.wait();
    try {
      round->trainer->engine->send_weights(round->options);
      round->done.set_value({WT_OK, ""});
    } catch (const Error& e) {
      round->done.set_value({e.code(), e.what()});
    }
  }).detach();
  // The hold is armed before send_weights can reach update_weights: the thread waits for it.
  client.hold_updates(sender_id.get());
  armed.set_value();
  auto give_up = [&](const std::string& why) {
    lb.poisoned = true;  // the thread may still read the checkpoint
    client.release();
    fail("{}", why);
  };
  if (!client.wait_held(std::chrono::seconds(30))) {
    if (result.wait_for(std::chrono::seconds(0)) == std::future_status::ready)
      fail("send_weights ended before its update_weights call: {}", result.get().second);
    give_up("send_weights did not reach update_weights within 30 s");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let it block for real
  const bool in_client_call = client.held_on_sender_thread();
  auto t0 = Clock::now();
  try {
    round->trainer->engine->abort();  // the plugin's abort, then the host's release of its calls
  } catch (const Error& e) {
    give_up(fmt::format("abort() failed: {}", e.what()));
  }
  if (result.wait_for(kAbortDeadline) != std::future_status::ready)
    give_up(fmt::format("send_weights was still blocked {} s after abort() from another thread{}",
                        kAbortDeadline.count(),
                        in_client_call ? ""
                                       : " (it waits in its own code, the update call being on a "
                                         "side thread: the plugin's abort must end that wait)"));
  auto took = Clock::now() - t0;
  client.release();  // a side thread's held call, if any
  auto [code, message] = result.get();
  if (code != WT_ERR_ABORTED)
    fail("after abort(), send_weights returned {} ({}), not WT_ERR_ABORTED", status_name(code),
         message);
  round->trainer.reset();
  lb.previous = std::move(before);
  // The inference side drops the half-done round (the engine may not have reached it).
  HttpClient(lb.url).end_weight_update("wt conformance: the abort check ended this round");
  if (auto d = lb.differences(lb.verified); !d.empty()) fail("after the aborted round, {}", d);
  detail = fmt::format(
      "send_weights returned WT_ERR_ABORTED {} after abort() ({}); worker unchanged", seconds(took),
      in_client_call ? "it was blocked in the held update call, released as the "
                       "host does"
                     : "the plugin's own abort ended its wait; the held update "
                       "call was on a side thread");
}

void check_recovery(Context& ctx, std::string& detail) {
  Loopback& lb = loopback(ctx);
  if (lb.verified.empty()) throw Skipped("no round was verified");
  if (lb.poisoned) throw Skipped("the abort check left a send_weights blocked");
  auto start = Clock::now();
  auto t = lb.trainer(ctx);
  lb.verified_round(*t, "the round after the failures");
  lb.verified_round(*t, "the next round");
  detail = fmt::format("a fresh trainer_init synced 2 more rounds, verified, in {}",
                       seconds(Clock::now() - start));
}

namespace {

using SendResult = std::pair<wt_status, std::string>;

// abort-receive's round. Everything the sending thread uses, owned with it: a send_weights that
// never returns keeps it alive instead of reading freed memory.
struct HeldReceiveRound {
  std::unique_ptr<Loopback::Trainer> trainer;
  std::unique_ptr<HeldSource> source;
  std::promise<SendResult> done;
};

void send_held_receive_round(const std::shared_ptr<HeldReceiveRound>& round) {
  std::thread([round]() {
    SendOptions o;
    o.weight_version = "conformance-abort-receive";
    try {
      round->trainer->engine->send_weights(o);
      round->done.set_value({WT_OK, ""});
    } catch (const Error& e) {
      round->done.set_value({e.code(), e.what()});
    }
  }).detach();
}

// Ends the round on both sides; a send_weights still blocked after the abort poisons the loopback
// (its thread may still read the checkpoint).
void end_held_receive_round(Loopback& lb, HeldReceiveRound& round,
                            std::future<SendResult>& result) {
  round.source->release();
  round.trainer->engine->abort();
  if (result.wait_for(kAbortDeadline) != std::future_status::ready) {
    lb.poisoned = true;
    return;
  }
  round.trainer.reset();
  HttpClient(lb.url).end_weight_update("wt conformance: the abort-receive check ended this round");
}

// Waits until the receive has been outstanding for a while (true), or until it is clear the backend
// makes its update call only once the data is all there (the source held, no call for 1 s).
bool receive_blocked(HarnessClient& client, HeldSource& source, std::future<SendResult>& result) {
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  auto held_since = Clock::time_point::max();
  while (Clock::now() < give_up) {
    if (result.wait_for(std::chrono::milliseconds(20)) == std::future_status::ready) break;
    const bool in_flight = client.updates_in_flight() > 0;
    if (in_flight && Clock::now() - client.last_update_change() > std::chrono::milliseconds(500))
      return true;
    if (in_flight || !source.holding()) {
      held_since = Clock::time_point::max();
      continue;
    }
    if (held_since == Clock::time_point::max()) held_since = Clock::now();
    if (Clock::now() - held_since > std::chrono::seconds(1)) break;
  }
  return false;
}

struct AbortedReceive {
  bool returned = false;  // within kAbortDeadline
  Clock::duration took{};
};

// The inference side aborts the round: wt serve's /end_weight_update calls the worker's abort()
// while its receive is blocked.
AbortedReceive abort_receive_from_inference_side(const std::string& url, HarnessClient& client) {
  AbortedReceive a;
  const auto t0 = Clock::now();
  std::thread ender([url] {
    try {
      HttpClient(url).end_weight_update("wt conformance: aborting a blocked receive");
    } catch (...) {
    }
  });
  while (Clock::now() - t0 < kAbortDeadline) {
    if (client.updates_in_flight() == 0) {
      a.returned = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  a.took = Clock::now() - t0;
  ender.join();
  return a;
}

}  // namespace

void check_abort_receive(Context& ctx, std::string& detail) {
  Loopback& lb = loopback(ctx);
  if (lb.poisoned) throw Skipped("the abort check left a send_weights blocked");
  if (lb.sparse) {
    detail =
        "a delta round's patches are all in the send_weights call: its receive never waits "
        "on a trainer held back here";
    return;
  }
  // The trainer's round is started with a source that holds its second tensor back: a backend
  // that streams has its update call (the worker's receive) outstanding and waiting for bytes.
  auto round = std::make_shared<HeldReceiveRound>();
  round->source = std::make_unique<HeldSource>(*lb.checkpoint);
  round->trainer = lb.trainer(ctx, round->source.get());
  auto result = round->done.get_future();
  send_held_receive_round(round);
  HarnessClient& client = *round->trainer->client;
  if (!receive_blocked(client, *round->source, result)) {
    const bool held = round->source->holding();
    end_held_receive_round(lb, *round, result);
    if (!held) fail("the round ended before its source was held back");
    detail =
        "the backend calls update_weights only once its data is produced: its receive never "
        "waits on the trainer (nothing to abort)";
    return;
  }
  const AbortedReceive aborted = abort_receive_from_inference_side(lb.url, client);
  end_held_receive_round(lb, *round, result);
  if (!aborted.returned)
    fail(
        "the worker's receive was still blocked {} s after the inference side aborted it "
        "(worker abort() from another thread must end every wait of receive)",
        kAbortDeadline.count());
  if (!lb.verified.empty())
    if (auto d = lb.differences(lb.verified); !d.empty()) fail("after the aborted receive, {}", d);
  detail =
      fmt::format("the worker's blocked receive returned {} after its abort(){}",
                  seconds(aborted.took), lb.verified.empty() ? "" : "; its weights are unchanged");
}

// peer-killed's second half: a worker (in a third `wt serve`) whose trainer, a process of its own,
// is killed with SIGKILL while the worker receives. The worker must fail its receive within
// kWorkerDeadline with an error that names the trainer (its address, or the word trainer, sender
// or rank 0); a backend whose worker is not receiving at that moment has nothing to fail.
std::string worker_whose_trainer_dies(Context& ctx, Loopback& lb) {
  constexpr auto kWorkerDeadline = std::chrono::seconds(30);
  if (lb.sparse)
    return "trainer killed: a delta round's patches are all in one call, nothing to kill it in";
  auto [server, url] = another_worker(ctx, lb, "a third worker");
  const nlohmann::json fields = init_fields_for_trainer(ctx, lb.worker_world_size);
  std::vector<std::string> argv{ctx.options.wt_program, "conformance", ctx.options.path,
                                "--trainer-for",        url,           "--trainer-fields",
                                fields.dump()};
  for (const auto& f : lb.checkpoint_files) argv.insert(argv.end(), {"--checkpoint", f});
  Child trainer(argv);
  if (!trainer.wait_for("holding", std::chrono::seconds(30)) ||
      !trainer.wait_for("\n", std::chrono::seconds(5)))
    fail("the trainer process (for the worker at {}) did not reach its round: {}", url,
         trainer.output().substr(0, 600));
  const bool receiving = trainer.output().find("holding, update under way") != std::string::npos;
  server->drain();
  const std::size_t seen = server->output().size();
  const auto t0 = Clock::now();
  trainer.kill_and_reap(SIGKILL);
  if (!receiving)
    return "trainer killed: its worker was not receiving (the backend calls update_weights once "
           "its data is produced), nothing to fail";
  // wt serve logs the failed receive ("/update_weights: ... failed: <the worker's error>").
  std::string line;
  while (Clock::now() - t0 < kWorkerDeadline) {
    server->drain();
    const std::string& out = server->output();
    const auto at = out.find("/update_weights: ", seen);
    if (at != std::string::npos && out.find('\n', at) != std::string::npos) {
      line = out.substr(at, out.find('\n', at) - at);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto took = Clock::now() - t0;
  if (line.empty())
    fail(
        "the worker at {} was still receiving {} s after its trainer was killed mid-round: a "
        "worker must fail within its deadline",
        url, kWorkerDeadline.count());
  const std::string address = fields.value("master_address", std::string("127.0.0.1"));
  bool names = false;
  for (const std::string& w :
       {address, std::string("trainer"), std::string("sender"), std::string("rank 0")})
    names |= line.find(w) != std::string::npos;
  if (!names)
    fail(
        "the worker at {} failed {} after its trainer was killed, but its error names no peer "
        "(the trainer's address, or trainer, sender, rank 0): {}",
        url, seconds(took), line);
  const auto said = line.find("failed: ");
  std::string error = said == std::string::npos ? line : line.substr(said + 8);
  if (error.size() > 160) error = error.substr(0, 157) + "...";
  return fmt::format("trainer killed mid-round: the worker failed {} later: \"{}\"", seconds(took),
                     error);
}

namespace {

// peer-killed's round. Everything the sending thread uses, owned with it: a send_weights that
// never returns keeps it alive instead of reading freed memory.
struct PeerKilledRound {
  std::unique_ptr<Loopback::Trainer> trainer;
  std::unique_ptr<HeldSource> source;
  std::vector<Delta> deltas;
  SendOptions options;
  std::promise<SendResult> done;
};

// A round to the worker at `url`, its trainer's calls bounded by `deadline`: a delta round of
// patches, or a dense one whose source holds its second tensor back.
std::shared_ptr<PeerKilledRound> peer_killed_round(Context& ctx, Loopback& lb,
                                                   const std::string& url,
                                                   std::chrono::seconds deadline) {
  auto round = std::make_shared<PeerKilledRound>();
  auto before = lb.previous;
  if (lb.sparse) {
    round->trainer = lb.trainer(ctx, nullptr, url, deadline);
    round->options = lb.next_round(round->deltas);  // patches: nothing to hold back
  } else {
    round->source = std::make_unique<HeldSource>(*lb.checkpoint);
    round->trainer = lb.trainer(ctx, round->source.get(), url, deadline);
    round->options.weight_version = "conformance-peer-killed";
  }
  lb.previous = std::move(before);  // the loopback's worker saw none of this
  return round;
}

void send_peer_killed_round(const std::shared_ptr<PeerKilledRound>& round) {
  std::thread([round] {
    try {
      round->trainer->engine->send_weights(round->options);
      round->done.set_value({WT_OK, ""});
    } catch (const Error& e) {
      round->done.set_value({e.code(), e.what()});
    }
  }).detach();
}

// Waits (up to 10 s) until the round is under way for a moment: the update call outstanding, or
// the source held back. True when the round ended first.
bool ended_before_under_way(HarnessClient& client, PeerKilledRound& round,
                            std::future<SendResult>& result) {
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  auto under_way_since = Clock::time_point::max();
  while (Clock::now() < give_up) {
    if (result.wait_for(std::chrono::milliseconds(20)) == std::future_status::ready) return true;
    const bool under_way =
        client.updates_in_flight() > 0 || (round.source && round.source->holding());
    if (!under_way) continue;
    if (under_way_since == Clock::time_point::max()) under_way_since = Clock::now();
    if (Clock::now() - under_way_since > std::chrono::milliseconds(300)) break;
  }
  return false;
}

}  // namespace

void check_peer_killed(Context& ctx, std::string& detail) {
  Loopback& lb = loopback(ctx);
  if (lb.poisoned) throw Skipped("the abort check left a send_weights blocked");
  // A worker of its own in a second `wt serve`, killed with SIGKILL while its round is under way;
  // the trainer is given kPeerDeadline for its calls and must fail within it, naming the worker.
  constexpr auto kPeerDeadline = std::chrono::seconds(5);
  auto [server, url] = another_worker(ctx, lb, "a second worker");
  auto round = peer_killed_round(ctx, lb, url, kPeerDeadline);
  auto result = round->done.get_future();
  send_peer_killed_round(round);
  HarnessClient& client = *round->trainer->client;
  // Mid-round: the update call outstanding, or the source held back, for a moment.
  const bool ended_first = ended_before_under_way(client, *round, result);
  server->drain();
  const pid_t pid = server->pid();
  const auto t0 = Clock::now();
  server->kill_and_reap(SIGKILL);
  std::string what = "mid-round";
  if (ended_first) {
    // The round was over before it could be caught under way (a small delta round): the next one
    // meets a worker that is gone.
    auto [code, message] = result.get();
    if (code != WT_OK) fail("the round before the kill failed: {}", message);
    what = "between rounds";
    round->done = {};
    result = round->done.get_future();
    send_peer_killed_round(round);
  }
  if (round->source) round->source->release();
  if (result.wait_for(kPeerDeadline + std::chrono::seconds(3)) != std::future_status::ready) {
    lb.poisoned = true;  // its thread may still read the checkpoint
    fail(
        "send_weights was still blocked {} s after its worker (wt serve at {}, pid {}) was "
        "killed {}: a trainer must fail within the deadline it was given ({} s for its calls)",
        std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - t0).count(), url, pid, what,
        kPeerDeadline.count());
  }
  const auto took = Clock::now() - t0;
  auto [code, message] = result.get();
  if (code == WT_OK)
    fail("send_weights returned WT_OK although its worker (wt serve at {}) was killed {}", url,
         what);
  const std::string hostport = url.substr(url.find("//") + 2);
  if (message.find(hostport) == std::string::npos)
    fail(
        "send_weights failed {} after its worker was killed {}, but its error does not name the "
        "worker ({}): {}",
        seconds(took), what, url, message);
  round->trainer.reset();
  detail = fmt::format("worker killed {}: the trainer failed {} later ({}), naming {}", what,
                       seconds(took), status_name(code), url);
  detail += "; " + worker_whose_trainer_dies(ctx, lb);
}

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// How broken-mid-tensor's broken round went: cut after `cut` bytes (0: never cut), the worker
// holding the round's update call then or not; `no_tcp` when the plugin moves no data over TCP.
struct BrokenRound {
  uint64_t cut = 0;
  bool receiving = false;
  bool no_tcp = false;
};

// The broken round, from a trainer process that stops the worker once its sockets moved the first
// MiB, and is killed once blocked; the worker is continued. A few tries: a round may outrun the
// watch that stops its worker.
BrokenRound break_a_round(Context& ctx, const Loopback& lb, const std::string& url, pid_t worker,
                          const std::vector<std::string>& files) {
  BrokenRound r;
  for (int attempt = 0; attempt < 3 && r.cut == 0; ++attempt) {
    const nlohmann::json fields = init_fields_for_trainer(ctx, lb.worker_world_size);
    std::vector<std::string> argv{
        ctx.options.wt_program, "conformance", ctx.options.path, "--trainer-for",       url,
        "--trainer-fields",     fields.dump(), "--stop-worker",  std::to_string(worker)};
    for (const auto& f : files) argv.insert(argv.end(), {"--checkpoint", f});
    Child trainer(argv);
    const auto out = trainer.wait_for("blocked after ", std::chrono::seconds(60));
    if (out) trainer.wait_for("call\n", std::chrono::seconds(5));
    const bool ended = trainer.output().find("round ended") != std::string::npos;
    trainer.kill_and_reap(SIGKILL);
    ::kill(worker, SIGCONT);
    const std::string& said = trainer.output();
    if (out) {
      const auto at = said.find("blocked after ") + 14;
      r.cut = std::strtoull(said.c_str() + at, nullptr, 10);
      r.receiving = said.find("update call out", at) != std::string::npos;
    } else if (ended) {
      HttpClient(url).end_weight_update("wt conformance: the round outran the watch; once more");
      const auto at = said.find("round ended after ") + 18;
      r.no_tcp = std::strtoull(said.c_str() + at, nullptr, 10) < kMiB;
      if (r.no_tcp) return r;
    } else {
      fail(
          "the trainer process of the broken round neither blocked nor ended its round within "
          "60 s: {}",
          said.substr(0, 600));
    }
  }
  return r;
}

// After the broken round: a worker that had the update call must leave it within `deadline` on
// its own (its receive fails); then it is told to end the round, as `wt launch` ends a killed
// job's. Says what the worker did.
std::string end_of_broken_round(const std::string& url, Child& server, bool receiving,
                                std::chrono::seconds deadline) {
  const auto t0 = Clock::now();
  std::string own = receiving ? "" : "had no update call yet";
  while (own.empty() && Clock::now() - t0 < deadline) {
    if (HttpClient(url).get("/health").value("updates_in_progress", 1) == 0)
      own = fmt::format("left its update call {} after it continued", seconds(Clock::now() - t0));
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (own.empty()) {
    server.drain();
    fail(
        "the worker at {} was still in its update call {} s after its trainer was killed in the "
        "middle of a tensor: a worker must fail its receive within its deadline; its log ends: {}",
        url, deadline.count(), tail_of(server.output(), 800));
  }
  try {
    HttpClient::Options o;
    o.timeout = deadline;
    HttpClient(url, o).end_weight_update("wt conformance: the round was broken, on purpose");
  } catch (const Error& e) {
    fail("the worker at {} did not end the broken round within {} s: {}", url, deadline.count(),
         e.what());
  }
  return own;
}

// Where the worker's weights differ from `want`, as a failure saying `what`.
void expect_worker_holds(const std::string& url, const Checksums& want, const std::string& what) {
  const Checksums have = HttpClient(url).weight_checksums();
  for (const auto& [name, sum] : want) {
    auto it = have.find(name);
    if (it == have.end() || it->second != sum)
      fail("{}: tensor '{}' differs on the worker", what, name);
  }
}

}  // namespace

// broken-mid-tensor: a round larger than the socket buffers, broken in the middle of a tensor. Its
// trainer is a process of its own; once its sockets moved the first MiB of the round it stops the
// worker, so it fills the sockets and blocks with the rest of the round unsent. The trainer is
// killed and the worker continued: it reads what was in flight, a tensor cut short, then finds its
// trainer gone. It must fail its receive within 30 s, end the round when told, keep the weights
// of the round before, and sync a fresh trainer, verified.
void check_broken_mid_tensor(Context& ctx, std::string& detail) {
  Loopback& lb = loopback(ctx);
  if (lb.poisoned) throw Skipped("the abort check left a send_weights blocked");
  if (lb.sparse) {
    detail = "not applicable: a delta backend's round is its patches, checked by rejected-update";
    return;
  }
  // Two tensors, each larger than what the sockets hold: once the worker stops, the round cannot
  // end in them.
  const uint64_t buffers = socket_buffer_bytes();
  const uint64_t tensor_bytes = std::max(16 * kMiB, (buffers / kMiB + 1) * kMiB);
  const auto files = write_synthetic_checkpoint(ctx.options.work_dir + "/model-large",
                                                large_layout(tensor_bytes), 11);
  SafetensorsSource checkpoint(files, SafetensorsSource::Memory::private_copy_on_write);
  auto [server, url] = another_worker(ctx, lb, "a worker for the large model");
  struct Continue {  // whatever happens below, the worker is never left stopped
    pid_t pid;
    ~Continue() { ::kill(pid, SIGCONT); }
  } cont{server->pid()};
  auto round_through = [&](WeightSource& source, const std::string& what, const Checksums& want) {
    auto t = lb.trainer(ctx, &source, url);
    SendOptions o;
    o.weight_version = "conformance-" + what;
    try {
      t->engine->send_weights(o);
    } catch (const Error& e) {
      fail("{}: send_weights failed: {}", what, e.what());
    }
    t.reset();
    expect_worker_holds(url, want, what);
  };
  Checksums before;  // what the worker must still hold after the broken round
  for (std::size_t i = 0; i < checkpoint.size(); ++i) {
    auto b = checkpoint.bytes(i);
    before[checkpoint.metadata()[i].name] = checksum_bytes(b.data(), b.size());
  }
  round_through(checkpoint, "the round before", before);
  const BrokenRound broken = break_a_round(ctx, lb, url, server->pid(), files);
  if (broken.no_tcp) {
    detail = "not applicable: the plugin's round moves no data over TCP sockets";
    return;
  }
  if (broken.cut == 0)
    fail("3 rounds of 2 x {} MiB ended before their worker could be stopped after the first MiB",
         tensor_bytes / kMiB);
  const std::string own =
      end_of_broken_round(url, *server, broken.receiving, std::chrono::seconds(30));
  expect_worker_holds(url, before,
                      "after a round broken mid-tensor (part of it committed: the weights must be "
                      "the round before's)");
  InvertedSource inverted(checkpoint);
  round_through(inverted, "the round after", inverted.checksums());
  detail = fmt::format(
      "a round of 2 x {} MiB (socket buffers {} MiB) cut after {} MiB (its worker stopped, its "
      "trainer blocked, then killed): the worker {}, kept its weights, and a fresh trainer "
      "synced, verified",
      tensor_bytes / kMiB, buffers / kMiB, broken.cut / kMiB, own);
}

// broken-mid-tensor's trainer process: one round of the checkpoint inverted. Once its sockets
// moved the round's first MiB it stops the worker, says so, then says "blocked" when nothing more
// moves (the sockets are full) and waits to be killed. A round that ends first says "round ended".
int run_broken_round(const TrainerProcess& p, Client& client, const std::atomic<int>& updates,
                     WeightSource& checkpoint) {
  InvertedSource inverted(checkpoint);
  auto engine = trainer_init(InitInfo::from_json(p.fields, "--trainer-fields"), client, &inverted);
  auto say = [](const std::string& line) {
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  };
  std::atomic<bool> over{false};
  const uint64_t base = tcp_bytes_acked();
  std::thread watch([&] {
    uint64_t moved = 0;
    while (!over && (moved = tcp_bytes_acked() - base) < (uint64_t{1} << 20))
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (over || ::kill(p.stop_worker, SIGSTOP) != 0) return;
    say(fmt::format("worker stopped after {} bytes\n", moved));
    for (auto still = Clock::now(); !over;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (const uint64_t now = tcp_bytes_acked() - base; now != moved) {
        moved = now;
        still = Clock::now();
      } else if (Clock::now() - still > std::chrono::milliseconds(300)) {
        // An update call out this long reached the worker's socket: the worker receives next.
        say(fmt::format("blocked after {} bytes, {}\n", moved,
                        updates.load() > 0 ? "update call out" : "no update call"));
        return;
      }
    }
  });
  SendOptions o;
  o.weight_version = "conformance-broken-mid-tensor";
  try {
    engine->send_weights(o);
  } catch (...) {
    over = true;
    watch.join();
    throw;
  }
  over = true;
  watch.join();
  say(fmt::format("round ended after {} bytes\n", tcp_bytes_acked() - base));
  return 0;
}

// The trainer side of peer-killed's second half, as a process of its own so that it can be killed:
// `wt conformance PLUGIN --trainer-for URL --trainer-fields JSON --checkpoint FILE...`. When its
// source holds the second tensor back (for good) it prints "holding", or "holding, update under
// way" when an update call is outstanding then (its worker is receiving), and waits to be killed.
int run_trainer_process(const TrainerProcess& p) {
  class Counting : public Client {
   public:
    explicit Counting(const std::string& url) : http_(url) {}
    void init_weight_transfer_engine(std::string_view j) override {
      http_.init_weight_transfer_engine(j);
    }
    void start_weight_update() override { http_.start_weight_update(); }
    void update_weights(std::string_view j) override {
      struct InFlight {
        std::atomic<int>& n;
        explicit InFlight(std::atomic<int>& c) : n(c) { ++n; }
        ~InFlight() { --n; }
      } mark(in_flight);
      http_.update_weights(j);
    }
    std::atomic<int> in_flight{0};
    void finish_weight_update(const std::optional<std::string>& v) override {
      http_.finish_weight_update(v);
    }
    void end_weight_update(std::string_view r) override { http_.end_weight_update(r); }
    void abort_calls() override { http_.abort_calls(); }

   private:
    HttpClient http_;
  } client(p.url);
  Registry::instance().add_file(p.plugin);
  SafetensorsSource checkpoint(p.checkpoint, SafetensorsSource::Memory::private_copy_on_write);
  // Holds the second tensor back for good, saying whether an update call is outstanding then
  // (a streaming backend's worker is receiving) after a moment for it to start.
  class Holding : public HeldSource {
   public:
    Holding(WeightSource& inner, const std::atomic<int>& updates)
        : HeldSource(inner), updates_(updates) {}
    bool next(wt_tensor& out) override {
      if (++n_ == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        std::fputs(updates_.load() > 0 ? "holding, update under way\n" : "holding\n", stdout);
        std::fflush(stdout);
        for (;;) ::pause();  // until killed
      }
      return HeldSource::next(out);
    }

   private:
    const std::atomic<int>& updates_;
    int n_ = 0;
  } source(checkpoint, client.in_flight);
  if (p.stop_worker > 0) return run_broken_round(p, client, client.in_flight, checkpoint);
  auto engine = trainer_init(InitInfo::from_json(p.fields, "--trainer-fields"), client, &source);
  SendOptions o;
  o.weight_version = "conformance-peer-killed";
  engine->send_weights(o);
  return 1;  // never reached: the source holds until the process is killed
}

void check_leftovers(Context& ctx, std::string& detail) {
  Loopback& lb = loopback(ctx);
  if (lb.poisoned) throw Skipped("the abort check left a send_weights blocked");
  std::vector<std::string> found;
  // Processes: the first three named, the rest counted, so that the other kinds still show.
  std::size_t strays = 0;
  for (const auto& [check, p] : ctx.strays)
    if (++strays <= 3)
      found.push_back(fmt::format("process {} ({}) still running after '{}' (killed)", p.pid,
                                  p.command, check));
  if (strays > 3)
    found.push_back(
        fmt::format("{} more process(es) still running after later checks (killed)", strays - 3));
  for (const auto& p : descendants(lb.server->pid()))
    found.push_back(
        fmt::format("process {} ({}) started by the worker side, still running", p.pid, p.command));
  // Descriptors and threads settle as engines finish tearing down: a few seconds' grace.
  auto compare = [&](const Holdings& before, pid_t pid, const std::string& side) {
    Holdings now;
    for (int i = 0; i < 30; ++i) {
      now = holdings(pid);
      if (now.fds.size() <= before.fds.size() && now.threads <= before.threads) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (now.fds.size() > before.fds.size()) {
      std::vector<std::string> extra;
      for (const auto& [fd, target] : now.fds) {
        auto it = before.fds.find(fd);
        if (target != "?" && (it == before.fds.end() || it->second != target))
          extra.push_back(fmt::format("{} -> {}", fd, target));
      }
      if (extra.size() > 4) extra.resize(4);
      found.push_back(
          fmt::format("the {} holds {} more open descriptor(s) than before the rounds "
                      "({} then, {} now: {})",
                      side, now.fds.size() - before.fds.size(), before.fds.size(), now.fds.size(),
                      fmt::join(extra, ", ")));
    }
    if (now.threads > before.threads)
      found.push_back(
          fmt::format("the {} runs {} more thread(s) than before the rounds ({} then, "
                      "{} now)",
                      side, now.threads - before.threads, before.threads, now.threads));
  };
  compare(lb.baseline.trainer, ::getpid(), "trainer side (this process, every engine destroyed)");
  if (lb.baseline.worker_taken)
    compare(lb.baseline.worker, lb.server->pid(), "worker side (wt serve, after the same rounds)");
  // Files: the private temp and working directories this process and wt serve were given, and
  // /dev/shm, where a new name that no process holds open or mapped is a leftover.
  // In /dev/shm, a wt name says who made it (wt-<pid>-...): another live program's is not ours.
  std::set<pid_t> ours{::getpid(), lb.server->pid()};
  for (const auto& p : descendants(::getpid())) ours.insert(p.pid);
  auto another_programs = [&](const std::string& name) {
    if (name.rfind("wt-", 0) != 0) return false;
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + 3));
    return pid > 0 && ours.count(pid) == 0 && ::kill(pid, 0) == 0;
  };
  auto new_files = [&](const std::set<std::string>& before, const std::string& dir, bool shared) {
    for (const auto& name : list_dir(dir)) {
      if (before.count(name) != 0) continue;
      const std::string path = dir + "/" + name;
      if (shared && (another_programs(name) || in_use(path))) continue;
      found.push_back(fmt::format("{} was created during the rounds and left behind", path));
    }
  };
  new_files(lb.baseline.tmp, ctx.options.work_dir + "/tmp", false);
  new_files(lb.baseline.cwd, ctx.options.work_dir + "/cwd", false);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // another program's brief files
  new_files(lb.baseline.shm, "/dev/shm", true);
  if (!found.empty()) {
    if (found.size() > 6) found.resize(6);
    fail("{}", fmt::join(found, "; "));
  }
  detail = fmt::format(
      "no process, file (temp dir, working dir, /dev/shm), descriptor or thread left on either "
      "side{}",
      lb.baseline.worker_taken ? "" : " (the worker side's baseline was not taken: no round)");
}

}  // namespace wt::cli::conformance
