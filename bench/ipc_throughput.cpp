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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wt ipc throughput benchmark"};
  double gib = 1;
  int rounds = 11, warmup = 12, tensor_mib = 8;
  unsigned load_threads = 0;
  std::string wt_path, only;
  app.add_option("--gib", gib, "Model size in GiB")->capture_default_str();
  app.add_option("--rounds", rounds, "Timed rounds")->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed rounds first")->capture_default_str();
  app.add_option("--tensor-mib", tensor_mib, "Size of each tensor")->capture_default_str();
  app.add_option("--load-threads", load_threads,
                 "Receiver copy threads (wt serve --load-threads; 0: its default)")
      ->capture_default_str();
  app.add_option("--only", only, "Run only the cases whose name contains this text");
  app.add_option("--wt", wt_path, "Path of the wt program (default: next to this one)");
  CLI11_PARSE(app, argc, argv);
  if (wt_path.empty())
    wt_path = (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "wt").string();

  const auto total = static_cast<std::size_t>(gib * (1ull << 30));
  const auto tensor_bytes = static_cast<std::size_t>(tensor_mib) << 20;
  BlockSource private_source(total, tensor_bytes, false), shm_source(total, tensor_bytes, true);

  // The copy limit, measured again before every ipc round so that each ratio compares figures
  // taken under the same conditions: the faster of a plain memcpy (each thread one contiguous
  // share, into a warm malloc'd destination) and the receiver's pattern (tensor by tensor into a
  // warm anonymous destination with huge pages on request, as the receiver allocates its own).
  const std::size_t dst_size = private_source.total();
  auto* dst = static_cast<unsigned char*>(
      mmap(nullptr, dst_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (dst == MAP_FAILED) throw std::runtime_error("cannot allocate the memcpy destination");
  madvise(dst, dst_size, MADV_HUGEPAGE);
  std::memset(dst, 0, dst_size);
  std::unique_ptr<unsigned char[]> plain_dst(new unsigned char[dst_size]);
  std::memset(plain_dst.get(), 0, dst_size);
  const unsigned copy_threads = load_threads > 0 ? load_threads : wt::default_copy_threads();
  auto on_threads = [](unsigned threads, const std::function<void(unsigned)>& part) {
    auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (unsigned k = 1; k < threads; ++k) pool.emplace_back(part, k);
    part(0);
    for (auto& t : pool) t.join();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  auto receiver_pattern = [&](BlockSource& from, unsigned threads) {
    return on_threads(threads, [&](unsigned k) {
      const std::size_t n = from.count(), lo = n * k / threads, hi = n * (k + 1) / threads;
      for (std::size_t i = lo; i < hi; ++i)
        std::memcpy(dst + i * tensor_bytes, from.block(i), tensor_bytes);
    });
  };
  auto plain_memcpy = [&](BlockSource& from, unsigned threads) {
    return on_threads(threads, [&](unsigned k) {
      const std::size_t n = from.total(), lo = n * k / threads, hi = n * (k + 1) / threads;
      std::memcpy(plain_dst.get() + lo, from.block(0) + lo, hi - lo);
    });
  };
  struct Limit {
    double seconds, plain, pattern;  // the limit (the faster), and each copy's time
  };
  auto copy_limit = [&](BlockSource& from, unsigned threads) {
    const double plain = plain_memcpy(from, threads), pattern = receiver_pattern(from, threads);
    return Limit{std::min(plain, pattern), plain, pattern};
  };
  for (int i = 0; i < 2; ++i) {  // warm: both sources' pages and the destinations'
    copy_limit(private_source, copy_threads);
    copy_limit(shm_source, copy_threads);
  }
  fmt::print(
      "model: {} tensors x {} MiB = {:.2f} GiB; copy-limit and ipc rounds alternate, figures are "
      "medians of {} rounds after {} warm-up rounds; the limit is the faster of a plain memcpy "
      "and the receiver's copy pattern, with 1 and with {} thread(s) (the receiver's copy "
      "threads), from the same kind of memory as the case's weights\n",
      private_source.count(), tensor_mib,
      static_cast<double>(private_source.total()) / (1ull << 30), rounds, warmup, copy_threads);

  struct Case {
    const char* name;
    bool in_shm;  // the trainer's weights already live in /dev/shm: exported in place, no copy
    bool packed;
    int64_t buffer;
    int buffers;
    unsigned receiver_threads;  // 0: --load-threads
  };
  const Case cases[] = {{"unpacked, weights in /dev/shm (in place)", true, false, 0, 0, 0},
                        {"  same, receiver copying with 1 thread", true, false, 0, 0, 1},
                        {"unpacked, private weights (copied)", false, false, 0, 0, 0},
                        {"packed, 2 x 256 MiB buffers", false, true, 256 << 20, 2, 0},
                        {"packed, 2 x 64 MiB buffers", false, true, 64 << 20, 2, 0},
                        {"packed, 4 x 64 MiB buffers", false, true, 64 << 20, 4, 0},
                        {"packed, 4 x 32 MiB buffers", false, true, 32 << 20, 4, 0}};
  double best_copy = 0, best_packed = 0, in_place = 0, in_place_one_thread = 0;
  for (const auto& c : cases) {
    if (!only.empty() && std::string(c.name).find(only) == std::string::npos) continue;
    BlockSource& source = c.in_shm ? shm_source : private_source;
    const unsigned rx_threads = c.receiver_threads ? c.receiver_threads : copy_threads;
    auto [server, url] = wt::cli::start_server(
        wt_path, {"--backend", "ipc", "--load-threads", std::to_string(rx_threads),
                  "--expect-model-bytes", std::to_string(source.total())});
    {
      PhaseClient client(url);
      nlohmann::json fields = {{"backend", "ipc"}, {"rank", 0}, {"packed", c.packed}};
      if (c.packed)
        fields.update({{"packed_buffer_size_bytes", c.buffer}, {"packed_num_buffers", c.buffers}});
      auto engine = wt::trainer_init(wt::InitInfo::from_object(fields), client, &source);
      std::vector<double> ipc, one, many, plain, pattern, ratio, first, rx_faults, tx_faults;
      std::map<std::string, std::vector<double>> phases;
      for (int r = 0; r < warmup + rounds; ++r) {
        const Limit l1 = copy_limit(source, 1), ln = copy_limit(source, rx_threads);
        const uint64_t rx0 = faults_of(server->pid()), tx0 = own_faults();
        client.phases.clear();
        auto t0 = Clock::now();
        engine->send_weights();
        double t = std::chrono::duration<double>(Clock::now() - t0).count();
        const double rx = static_cast<double>(faults_of(server->pid()) - rx0),
                     tx = static_cast<double>(own_faults() - tx0);
        if (r < 2) {
          first.push_back(t);
          fmt::print("    round {}: {:.3f} s, page faults: receiver {:.0f}, trainer {:.0f}\n",
                     r + 1, t, rx, tx);
        }
        rx_faults.push_back(rx);
        tx_faults.push_back(tx);
        if (r < warmup) continue;
        ipc.push_back(t);
        one.push_back(l1.seconds);
        many.push_back(ln.seconds);
        plain.push_back(ln.plain);
        pattern.push_back(ln.pattern);
        ratio.push_back(ln.seconds / t);
        double calls = 0;
        for (const auto& [name, sec] : client.phases) {
          phases[name].push_back(sec);
          calls += sec;
        }
        // Packed updates run on side threads and overlap: then the calls add up to more than the
        // round, and the time outside them is shown as 0.
        phases["(outside the calls)"].push_back(std::max(0.0, t - calls));
      }
      auto gbs = [&](double sec) { return static_cast<double>(source.total()) / sec / 1e9; };
      const double r = median(ratio);
      double& best = c.in_shm   ? (c.receiver_threads == 1 ? in_place_one_thread : in_place)
                     : c.packed ? best_packed
                                : best_copy;
      best = std::max(best, r);
      fmt::print(
          "ipc {:<42} rx {} thr {:>6.3f} s {:>6.2f} GB/s | limit {:>6.2f} GB/s (plain memcpy "
          "{:.2f}, receiver pattern {:.2f}; 1 thr {:.2f}) | {:.2f}x limit | first rounds {:.2f}x, "
          "{:.2f}x the median | faults per warm round: receiver {:.0f}, trainer {:.0f}\n",
          c.name, rx_threads, median(ipc), gbs(median(ipc)), gbs(median(many)), gbs(median(plain)),
          gbs(median(pattern)), gbs(median(one)), r, first.size() > 0 ? first[0] / median(ipc) : 0,
          first.size() > 1 ? first[1] / median(ipc) : 0,
          median({rx_faults.end() - rounds, rx_faults.end()}),
          median({tx_faults.end() - rounds, tx_faults.end()}));
      std::string split;
      for (const auto& [name, v] : phases)
        split += fmt::format("{}{} {:.3f} s", split.empty() ? "" : ", ", name, median(v));
      fmt::print(
          "    phases (medians): {}; the update calls move the bytes at {:.2f} GB/s, {:.2f}x "
          "the limit\n",
          split, gbs(median(phases["update"])),
          median(many) / std::max(1e-9, median(phases["update"])));
      std::fflush(stdout);
    }
    server->kill(SIGTERM);
    server->wait();
  }
  fmt::print(
      "ipc / copy limit (the faster of plain memcpy and the receiver's pattern) with {} "
      "thread(s): weights in /dev/shm {:.2f}x (target >= 0.80x; "
      "{:.2f}x with a one-thread receiver, against the same limit); private weights {:.2f}x, "
      "packed {:.2f}x (targets >= 0.45x)\n",
      copy_threads, in_place, in_place_one_thread, best_copy, best_packed);
  munmap(dst, dst_size);
  return 0;
}
