// ipc host-memory throughput for a 1 GiB model, next to the best copy this machine does of the
// same bytes from the same kind of memory in the same run. That limit is the faster of two
// copies, each with the receiver's N threads (and with one): a plain memcpy, every thread one
// contiguous share of the model into a warm malloc'd destination, and the receiver's own pattern,
// tensor by tensor into a warm anonymous destination with transparent huge pages. Each ipc round
// is split into its client calls (start, update, finish): the update is where the receiver maps
// and copies, so its rate against the limit shows where the rest of the time goes.
// A trainer in this process sends to a `wt serve` receiver process over HTTP + POSIX shared
// memory; rounds are timed after warm-up rounds, and the first rounds are printed apart (what a
// new receiver's first sync costs). Prints GB/s and every ratio against the N-thread limit.
//
// Two kinds of trainer: weights in private memory (each round copies them into shared segments,
// then the receiver copies them out: two copies, overlapped in packed mode) and weights that
// already live in a /dev/shm file (exported in place: the receiver's copy is the only one).
//
//   build/bin/wt_bench_ipc [--gib 1] [--rounds 5] [--tensor-mib 8] [--only packed]
#include <wt/sdk/parallel_copy.hpp>
#include <wt/sdk/shm_segments.hpp>
#include <wt/services/http_client.hpp>
#include <wt/wt.hpp>

#include "subprocess.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// `count` tensors of `tensor_bytes` each, in private memory or in one file in /dev/shm (as a
// trainer that keeps its weights in shared memory has them; ipc then exports them in place).
class BlockSource : public wt::WeightSource {
 public:
  BlockSource(std::size_t total, std::size_t tensor_bytes, bool in_shm)
      : count_(total / tensor_bytes), bytes_(tensor_bytes) {
    const std::size_t size = count_ * bytes_;
    if (in_shm) {
      // A wt segment: removed by the next wt process if this benchmark is killed.
      auto c = wt::shm::create_segment(size);
      if (c.addr == nullptr)
        throw std::runtime_error(
            fmt::format("cannot {} {}: {}", c.step, c.name, std::strerror(c.error)));
      shm_name_ = c.name;
      void* p = c.addr;
      base_ = static_cast<unsigned char*>(p);
    } else {
      private_.reset(new unsigned char[size]);
      base_ = private_.get();
    }
    for (std::size_t i = 0; i < count_; ++i) {
      std::memset(block(i), static_cast<int>(i), bytes_);
      shapes_.push_back({static_cast<int64_t>(bytes_ / 4)});
      meta_.push_back(
          {fmt::format("model.layers.{}.weight", i), {kDLFloat, 32, 1}, shapes_.back()});
    }
  }
  ~BlockSource() override {
    if (!shm_name_.empty()) {
      munmap(base_, count_ * bytes_);
      shm_unlink(shm_name_.c_str());
    }
  }
  const std::vector<wt::ParamMeta>& metadata() override { return meta_; }
  void begin() override { next_ = 0; }
  bool next(wt_tensor& out) override {
    if (next_ >= count_) return false;
    out.name = meta_[next_].name.c_str();
    out.tensor = DLTensor{block(next_),          {kDLCPU, 0}, 1, {kDLFloat, 32, 1},
                          shapes_[next_].data(), nullptr,     0};
    ++next_;
    return true;
  }
  void end() override {}
  std::size_t total() const { return count_ * bytes_; }
  unsigned char* block(std::size_t i) { return base_ + i * bytes_; }
  std::size_t count() const { return count_; }
  std::size_t block_bytes() const { return bytes_; }

 private:
  std::size_t count_, bytes_;
  std::unique_ptr<unsigned char[]> private_;
  std::string shm_name_;
  unsigned char* base_ = nullptr;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<wt::ParamMeta> meta_;
  std::size_t next_ = 0;
};

// Minor page faults so far of a process (field 10 of /proc/PID/stat) and of this one.
uint64_t faults_of(pid_t pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(f)), {});
  auto close = text.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 10 && rest >> field; ++i) {
  }
  return std::strtoull(field.c_str(), nullptr, 10);
}
uint64_t own_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_minflt);
}

// The trainer's client, timing each kind of call of a round (start, update, finish).
class PhaseClient : public wt::Client {
 public:
  explicit PhaseClient(const std::string& url) : http_(url) {}
  void init_weight_transfer_engine(std::string_view j) override {
    http_.init_weight_transfer_engine(j);
  }
  void start_weight_update() override {
    timed("start", [&] { http_.start_weight_update(); });
  }
  void update_weights(std::string_view j) override {
    timed("update", [&] { http_.update_weights(j); });
  }
  void finish_weight_update(const std::optional<std::string>& v) override {
    timed("finish", [&] { http_.finish_weight_update(v); });
  }
  void end_weight_update(std::string_view r) override { http_.end_weight_update(r); }
  void abort_calls() override { http_.abort_calls(); }
  std::map<std::string, double> phases;  // seconds per kind of call, this round

 private:
  template <typename F>
  void timed(const char* name, F&& f) {
    auto t0 = Clock::now();
    f();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::lock_guard<std::mutex> l(mu_);  // packed updates may overlap on side threads
    phases[name] += s;
  }
  wt::HttpClient http_;
  std::mutex mu_;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Args {
  double gib = 1;
  int rounds = 11, warmup = 12, tensor_mib = 8;
  unsigned load_threads = 0;
  std::string wt_path, only;
};

void add_options(CLI::App& app, Args& a) {
  app.add_option("--gib", a.gib, "Model size in GiB")->capture_default_str();
  app.add_option("--rounds", a.rounds, "Timed rounds")->capture_default_str();
  app.add_option("--warmup", a.warmup, "Untimed rounds first")->capture_default_str();
  app.add_option("--tensor-mib", a.tensor_mib, "Size of each tensor")->capture_default_str();
  app.add_option("--load-threads", a.load_threads,
                 "Receiver copy threads (wt serve --load-threads; 0: its default)")
      ->capture_default_str();
  app.add_option("--only", a.only, "Run only the cases whose name contains this text");
  app.add_option("--wt", a.wt_path, "Path of the wt program (default: next to this one)");
}

// Where the copy limit copies to, warm: an anonymous destination with huge pages on request (as
// the receiver allocates its own) for the receiver's pattern, a malloc'd one for the plain memcpy.
struct CopyTargets {
  unsigned char* dst = nullptr;  // mmap'd: munmap it
  std::size_t size = 0;
  std::unique_ptr<unsigned char[]> plain_dst;
  std::size_t tensor_bytes = 0;
};

CopyTargets make_copy_targets(std::size_t size, std::size_t tensor_bytes) {
  CopyTargets to;
  to.size = size;
  to.tensor_bytes = tensor_bytes;
  to.dst = static_cast<unsigned char*>(
      mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (to.dst == MAP_FAILED) throw std::runtime_error("cannot allocate the memcpy destination");
  madvise(to.dst, size, MADV_HUGEPAGE);
  std::memset(to.dst, 0, size);
  to.plain_dst.reset(new unsigned char[size]);
  std::memset(to.plain_dst.get(), 0, size);
  return to;
}

// Runs part(k) for k in 0..threads-1, part(0) on this thread: the seconds they all took.
double on_threads(unsigned threads, const std::function<void(unsigned)>& part) {
  auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (unsigned k = 1; k < threads; ++k) pool.emplace_back(part, k);
  part(0);
  for (auto& t : pool) t.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double receiver_pattern(CopyTargets& to, BlockSource& from, unsigned threads) {
  return on_threads(threads, [&](unsigned k) {
    const std::size_t n = from.count(), lo = n * k / threads, hi = n * (k + 1) / threads;
    for (std::size_t i = lo; i < hi; ++i)
      std::memcpy(to.dst + i * to.tensor_bytes, from.block(i), to.tensor_bytes);
  });
}

double plain_memcpy(CopyTargets& to, BlockSource& from, unsigned threads) {
  return on_threads(threads, [&](unsigned k) {
    const std::size_t n = from.total(), lo = n * k / threads, hi = n * (k + 1) / threads;
    std::memcpy(to.plain_dst.get() + lo, from.block(0) + lo, hi - lo);
  });
}

struct Limit {
  double seconds, plain, pattern;  // the limit (the faster), and each copy's time
};

Limit copy_limit(CopyTargets& to, BlockSource& from, unsigned threads) {
  const double plain = plain_memcpy(to, from, threads),
               pattern = receiver_pattern(to, from, threads);
  return Limit{std::min(plain, pattern), plain, pattern};
}

void print_model(const BlockSource& model, const Args& a, unsigned copy_threads) {
  fmt::print(
      "model: {} tensors x {} MiB = {:.2f} GiB; copy-limit and ipc rounds alternate, figures are "
      "medians of {} rounds after {} warm-up rounds; the limit is the faster of a plain memcpy "
      "and the receiver's copy pattern, with 1 and with {} thread(s) (the receiver's copy "
      "threads), from the same kind of memory as the case's weights\n",
      model.count(), a.tensor_mib, static_cast<double>(model.total()) / (1ull << 30), a.rounds,
      a.warmup, copy_threads);
}

struct Case {
  const char* name;
  bool in_shm;  // the trainer's weights already live in /dev/shm: exported in place, no copy
  bool packed;
  int64_t buffer;
  int buffers;
  unsigned receiver_threads;  // 0: --load-threads
};
const Case kCases[] = {{"unpacked, weights in /dev/shm (in place)", true, false, 0, 0, 0},
                       {"  same, receiver copying with 1 thread", true, false, 0, 0, 1},
                       {"unpacked, private weights (copied)", false, false, 0, 0, 0},
                       {"packed, 2 x 256 MiB buffers", false, true, 256 << 20, 2, 0},
                       {"packed, 2 x 64 MiB buffers", false, true, 64 << 20, 2, 0},
                       {"packed, 4 x 64 MiB buffers", false, true, 64 << 20, 4, 0},
                       {"packed, 4 x 32 MiB buffers", false, true, 32 << 20, 4, 0}};

// Each kind of case's best ratio to the limit, for the summary.
struct Bests {
  double best_copy = 0, best_packed = 0, in_place = 0, in_place_one_thread = 0;
};

// What one case's rounds measured.
struct Samples {
  std::vector<double> ipc, one, many, plain, pattern, ratio, first, rx_faults, tx_faults;
  std::map<std::string, std::vector<double>> phases;
};

// Round r of a case, after its own copy limits (1 thread, the receiver's threads): a warm-up round
// counts only for the page faults (and the first two are printed).
void run_round(int r, int warmup, CopyTargets& to, BlockSource& source, unsigned rx_threads,
               pid_t server, PhaseClient& client, wt::TrainerEngine& engine, Samples& s) {
  const Limit l1 = copy_limit(to, source, 1), ln = copy_limit(to, source, rx_threads);
  const uint64_t rx0 = faults_of(server), tx0 = own_faults();
  client.phases.clear();
  auto t0 = Clock::now();
  engine.send_weights();
  double t = std::chrono::duration<double>(Clock::now() - t0).count();
  const double rx = static_cast<double>(faults_of(server) - rx0),
               tx = static_cast<double>(own_faults() - tx0);
  if (r < 2) {
    s.first.push_back(t);
    fmt::print("    round {}: {:.3f} s, page faults: receiver {:.0f}, trainer {:.0f}\n", r + 1, t,
               rx, tx);
  }
  s.rx_faults.push_back(rx);
  s.tx_faults.push_back(tx);
  if (r < warmup) return;
  s.ipc.push_back(t);
  s.one.push_back(l1.seconds);
  s.many.push_back(ln.seconds);
  s.plain.push_back(ln.plain);
  s.pattern.push_back(ln.pattern);
  s.ratio.push_back(ln.seconds / t);
  double calls = 0;
  for (const auto& [name, sec] : client.phases) {
    s.phases[name].push_back(sec);
    calls += sec;
  }
  // Packed updates run on side threads and overlap: then the calls add up to more than the
  // round, and the time outside them is shown as 0.
  s.phases["(outside the calls)"].push_back(std::max(0.0, t - calls));
}

// A case's figures: medians of its timed rounds (`r`: its ratio to the limit), its first rounds,
// and the time of each kind of call.
void print_case(const Case& c, unsigned rx_threads, int rounds, const BlockSource& source, double r,
                Samples& s) {
  auto gbs = [&](double sec) { return static_cast<double>(source.total()) / sec / 1e9; };
  fmt::print(
      "ipc {:<42} rx {} thr {:>6.3f} s {:>6.2f} GB/s | limit {:>6.2f} GB/s (plain memcpy "
      "{:.2f}, receiver pattern {:.2f}; 1 thr {:.2f}) | {:.2f}x limit | first rounds {:.2f}x, "
      "{:.2f}x the median | faults per warm round: receiver {:.0f}, trainer {:.0f}\n",
      c.name, rx_threads, median(s.ipc), gbs(median(s.ipc)), gbs(median(s.many)),
      gbs(median(s.plain)), gbs(median(s.pattern)), gbs(median(s.one)), r,
      s.first.size() > 0 ? s.first[0] / median(s.ipc) : 0,
      s.first.size() > 1 ? s.first[1] / median(s.ipc) : 0,
      median({s.rx_faults.end() - rounds, s.rx_faults.end()}),
      median({s.tx_faults.end() - rounds, s.tx_faults.end()}));
  std::string split;
  for (const auto& [name, v] : s.phases)
    split += fmt::format("{}{} {:.3f} s", split.empty() ? "" : ", ", name, median(v));
  fmt::print(
      "    phases (medians): {}; the update calls move the bytes at {:.2f} GB/s, {:.2f}x "
      "the limit\n",
      split, gbs(median(s.phases["update"])),
      median(s.many) / std::max(1e-9, median(s.phases["update"])));
  std::fflush(stdout);
}

// One case against a receiver of its own, which is stopped after it.
void run_case(const Case& c, const Args& a, CopyTargets& to, BlockSource& source,
              unsigned copy_threads, Bests& bests) {
  const unsigned rx_threads = c.receiver_threads ? c.receiver_threads : copy_threads;
  auto [server, url] = wt::cli::start_server(
      a.wt_path, {"--backend", "ipc", "--load-threads", std::to_string(rx_threads),
                  "--expect-model-bytes", std::to_string(source.total())});
  {
    PhaseClient client(url);
    nlohmann::json fields = {{"backend", "ipc"}, {"rank", 0}, {"packed", c.packed}};
    if (c.packed)
      fields.update({{"packed_buffer_size_bytes", c.buffer}, {"packed_num_buffers", c.buffers}});
    auto engine = wt::trainer_init(wt::InitInfo::from_object(fields), client, &source);
    Samples s;
    for (int r = 0; r < a.warmup + a.rounds; ++r)
      run_round(r, a.warmup, to, source, rx_threads, server->pid(), client, *engine, s);
    const double r = median(s.ratio);
    double& best = c.in_shm ? (c.receiver_threads == 1 ? bests.in_place_one_thread : bests.in_place)
                   : c.packed ? bests.best_packed
                              : bests.best_copy;
    best = std::max(best, r);
    print_case(c, rx_threads, a.rounds, source, r, s);
  }
  server->kill(SIGTERM);
  server->wait();
}

void print_summary(unsigned copy_threads, const Bests& b) {
  fmt::print(
      "ipc / copy limit (the faster of plain memcpy and the receiver's pattern) with {} "
      "thread(s): weights in /dev/shm {:.2f}x (target >= 0.80x; "
      "{:.2f}x with a one-thread receiver, against the same limit); private weights {:.2f}x, "
      "packed {:.2f}x (targets >= 0.45x)\n",
      copy_threads, b.in_place, b.in_place_one_thread, b.best_copy, b.best_packed);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wt ipc throughput benchmark"};
  Args a;
  add_options(app, a);
  CLI11_PARSE(app, argc, argv);
  if (a.wt_path.empty())
    a.wt_path = (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "wt").string();

  const auto total = static_cast<std::size_t>(a.gib * (1ull << 30));
  const auto tensor_bytes = static_cast<std::size_t>(a.tensor_mib) << 20;
  BlockSource private_source(total, tensor_bytes, false), shm_source(total, tensor_bytes, true);

  // The copy limit, measured again before every ipc round so that each ratio compares figures
  // taken under the same conditions: the faster of a plain memcpy (each thread one contiguous
  // share, into a warm malloc'd destination) and the receiver's pattern (tensor by tensor into a
  // warm anonymous destination with huge pages on request, as the receiver allocates its own).
  CopyTargets to = make_copy_targets(private_source.total(), tensor_bytes);
  const unsigned copy_threads = a.load_threads > 0 ? a.load_threads : wt::default_copy_threads();
  for (int i = 0; i < 2; ++i) {  // warm: both sources' pages and the destinations'
    copy_limit(to, private_source, copy_threads);
    copy_limit(to, shm_source, copy_threads);
  }
  print_model(private_source, a, copy_threads);

  Bests bests;
  for (const auto& c : kCases) {
    if (!a.only.empty() && std::string(c.name).find(a.only) == std::string::npos) continue;
    run_case(c, a, to, c.in_shm ? shm_source : private_source, copy_threads, bests);
  }
  print_summary(copy_threads, bests);
  munmap(to.dst, to.size);
  return 0;
}
