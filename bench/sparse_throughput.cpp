// sparse_nccl in one run: the trainer's patch check (GB/s of indices + values, one core), the
// delta helper (GB/s of tensor compared), and the time of a ~1 % delta round next to a dense
// packed nccl round of the same model between the same two ranks (trainer and reference receiver
// in this process, Gloo over loopback). Rounds are timed after two warm-up rounds; each round
// figure is the median round. Each figure stands next to its limit on this machine: memcpy of the
// same bytes, from the same memory, with one thread, into a pre-faulted destination.
//
//   build/bin/wt_bench_sparse [--mib 256] [--rounds 7] [--fraction 0.01]
#include "patch_rules.hpp"
#include "support/free_port.hpp"

#include <wt/delta.hpp>
#include <wt/services/receiver.hpp>
#include <wt/wt.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// `count` bfloat16 tensors of `bytes` each; step() changes `fraction` of every tensor's elements.
class Model : public wt::WeightSource {
 public:
  Model(std::size_t count, std::size_t bytes) : data_(count, std::vector<unsigned char>(bytes)) {
    std::mt19937 rng(3);
    for (auto& t : data_)
      for (std::size_t i = 0; i < t.size(); i += 2) {
        t[i] = static_cast<unsigned char>(rng());
        t[i + 1] = static_cast<unsigned char>(0x3c + rng() % 4);  // finite bfloat16
      }
    shape_ = {static_cast<int64_t>(bytes / 2)};
    for (std::size_t i = 0; i < count; ++i)
      meta_.push_back({fmt::format("layer.{}.weight", i), {kDLBfloat, 16, 1}, shape_});
  }
  void step(double fraction, uint32_t seed) {
    std::mt19937 rng(seed);
    for (auto& t : data_) {
      const std::size_t n = t.size() / 2;
      for (std::size_t k = 0; k < static_cast<std::size_t>(n * fraction); ++k)
        t[2 * (rng() % n)] ^= 1;
    }
  }
  DLTensor tensor(std::size_t i) {
    return DLTensor{data_[i].data(), {kDLCPU, 0}, 1, {kDLBfloat, 16, 1}, shape_.data(), nullptr, 0};
  }
  std::size_t size() const { return data_.size(); }
  std::size_t total() const { return data_.size() * data_[0].size(); }
  const std::vector<wt::ParamMeta>& metadata() override { return meta_; }
  void begin() override { next_ = 0; }
  bool next(wt_tensor& out) override {
    if (next_ == data_.size()) return false;
    out.name = meta_[next_].name.c_str();
    out.tensor = tensor(next_++);
    return true;
  }
  void end() override {}
  std::vector<std::vector<unsigned char>> data_;

 private:
  std::vector<int64_t> shape_;
  std::vector<wt::ParamMeta> meta_;
  std::size_t next_ = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

wt::InitInfo info(const std::string& backend) {
  nlohmann::json j = {{"backend", backend},
                      {"master_address", "127.0.0.1"},
                      {"master_port", wt::test::free_port()},
                      {"world_size", 2},
                      {"rank", 0}};
  if (backend == "nccl") j["packed_buffer_size_bytes"] = 64 << 20;
  return wt::InitInfo::from_object(j);
}

struct Args {
  int mib = 256, rounds = 7;
  double fraction = 0.01;
};

void add_options(CLI::App& app, Args& a) {
  app.add_option("--mib", a.mib, "model size");
  app.add_option("--rounds", a.rounds);
  app.add_option("--fraction", a.fraction, "elements changed per training step");
}

// The deltas of `model` against `base` (its tensors before a training step) into `deltas`: the
// seconds the delta helper took.
double time_delta_helper(Model& model, std::vector<std::vector<unsigned char>>& base,
                         std::vector<wt::Delta>& deltas) {
  auto t0 = Clock::now();
  for (std::size_t i = 0; i < model.size(); ++i) {
    int64_t shape[1] = {static_cast<int64_t>(base[i].size() / 2)};
    DLTensor before{base[i].data(), {kDLCPU, 0}, 1, {kDLBfloat, 16, 1}, shape, nullptr, 0};
    deltas.push_back(wt::make_delta("t", before, model.tensor(i)));
  }
  return seconds_since(t0);
}

// The deltas, named after their tensors, as patches (views of `deltas`, which must outlive them
// unchanged); `patch_bytes`: their indices' and values' bytes.
std::vector<wt_sparse_patch> patches_of(Model& model, std::vector<wt::Delta>& deltas,
                                        std::size_t& patch_bytes) {
  std::vector<wt_sparse_patch> patches;
  for (std::size_t i = 0; i < deltas.size(); ++i) deltas[i].name = model.metadata()[i].name;
  for (const auto& d : deltas) {
    patches.push_back(d.patch());
    patch_bytes += d.indices.size() * 4 + d.values.size();
  }
  return patches;
}

// The seconds of one patch check of the round, averaged over five.
double time_patch_check(const std::vector<wt_sparse_patch>& patches) {
  const auto t0 = Clock::now();
  for (int r = 0; r < 5; ++r) wt::sparse::check_round(patches, nullptr);
  return seconds_since(t0) / 5;
}

// The median of five one-thread copies into `sink` of what `each` hands the copy it is given.
template <typename Each>
double copy_seconds(std::vector<unsigned char>& sink, Each&& each) {
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    const auto c0 = Clock::now();
    std::size_t at = 0;
    each([&](const void* p, std::size_t n) {
      std::memcpy(sink.data() + at, p, n);
      at += n;
    });
    t.push_back(seconds_since(c0));
  }
  return median(t);
}

double patch_copy_seconds(std::vector<unsigned char>& sink, const std::vector<wt::Delta>& deltas) {
  return copy_seconds(sink, [&](auto copy) {
    for (const auto& d : deltas) {
      copy(d.indices.data(), d.indices.size() * 4);
      copy(d.values.data(), d.values.size());
    }
  });
}

double model_copy_seconds(std::vector<unsigned char>& sink, Model& model) {
  return copy_seconds(sink, [&](auto copy) {
    for (std::size_t i = 0; i < model.size(); ++i)
      copy(model.data_[i].data(), model.data_[i].size());
  });
}

// Dense packed nccl rounds of the whole model: the median round's seconds.
double time_dense_rounds(Model& model, int rounds) {
  wt::Receiver receiver("nccl");
  wt::InProcessClient client(receiver);
  auto engine = wt::trainer_init(info("nccl"), client, &model);
  // Warm-up: both halves of the receiver's double buffering are touched once.
  engine->send_weights();
  engine->send_weights();
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const auto s0 = Clock::now();
    engine->send_weights();
    times.push_back(seconds_since(s0));
  }
  return median(times);
}

// Rounds of one training step's patches each (`fraction` of the elements): the median round's
// seconds.
double time_sparse_rounds(Model& model, double fraction, int rounds) {
  wt::Receiver receiver("sparse_nccl");
  receiver.load_base(model);
  wt::InProcessClient client(receiver);
  auto engine = wt::trainer_init(info("sparse_nccl"), client, nullptr);
  auto previous = model.data_;
  auto send_step = [&](uint32_t seed) {
    model.step(fraction, seed);
    std::vector<wt::Delta> ds;
    wt::SendOptions o;
    for (std::size_t i = 0; i < model.size(); ++i) {
      int64_t shape[1] = {static_cast<int64_t>(previous[i].size() / 2)};
      DLTensor before{previous[i].data(), {kDLCPU, 0}, 1, {kDLBfloat, 16, 1}, shape, nullptr, 0};
      ds.push_back(wt::make_delta(model.metadata()[i].name, before, model.tensor(i)));
    }
    for (const auto& d : ds) o.patches.push_back(d.patch());
    previous = model.data_;
    const auto s0 = Clock::now();
    engine->send_weights(o);
    return seconds_since(s0);
  };
  send_step(100);  // warm-up
  send_step(101);
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) times.push_back(send_step(102 + r));
  return median(times);
}

struct Figures {
  double delta_s = 0, check_s = 0, patch_copy_s = 0, model_copy_s = 0, dense_s = 0, sparse_s = 0;
  std::size_t patch_bytes = 0;
};

void print_figures(const Figures& f, std::size_t count, const Model& model, double fraction) {
  const double gb = static_cast<double>(model.total()) / 1e9;
  fmt::print(
      "model: {} bfloat16 tensors, {:.0f} MiB; a training step changes {:.1f} % of elements\n",
      count, static_cast<double>(model.total()) / (1 << 20), 100 * fraction);
  fmt::print("{:<44} {:>10}\n", "measure", "figure");
  const double patch_gb = static_cast<double>(f.patch_bytes) / 1e9;
  fmt::print("{:<44} {:>10.2f}   (memcpy of the same bytes, 1 thread: {:.2f}; {:.2f}x)\n",
             "patch check, GB/s of indices+values, 1 core", patch_gb / f.check_s,
             patch_gb / f.patch_copy_s, f.patch_copy_s / f.check_s);
  // The helper reads two versions of every tensor.
  fmt::print("{:<44} {:>10.2f}   (memcpy reading as many bytes, 1 thread: {:.2f}; {:.2f}x)\n",
             "delta helper, GB/s of tensor compared", gb / f.delta_s, gb / f.model_copy_s / 2,
             2 * f.model_copy_s / f.delta_s);
  fmt::print("{:<44} {:>10.3f}   (memcpy of the model, 1 thread: {:.3f} s; {:.2f}x)\n",
             "dense packed nccl round, s", f.dense_s, f.model_copy_s, f.model_copy_s / f.dense_s);
  fmt::print("{:<44} {:>10.3f}\n", "1 % sparse_nccl round, s", f.sparse_s);
  fmt::print("{:<44} {:>10.3f}\n", "sparse / dense", f.sparse_s / f.dense_s);
  fmt::print("patches: {:.1f} MiB per round ({:.2f} % of the model's bytes)\n",
             static_cast<double>(f.patch_bytes) / (1 << 20),
             100.0 * static_cast<double>(f.patch_bytes) / static_cast<double>(model.total()));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sparse_nccl: patch check, delta helper, and a 1 % round next to a dense round"};
  Args a;
  add_options(app, a);
  CLI11_PARSE(app, argc, argv);
  const std::size_t count = 64;
  Model model(count, (static_cast<std::size_t>(a.mib) << 20) / count / 2 * 2);
  Figures f;

  // The delta helper and the patch check, on one training step.
  auto base = model.data_;
  model.step(a.fraction, 1);
  std::vector<wt::Delta> deltas;
  f.delta_s = time_delta_helper(model, base, deltas);
  const std::vector<wt_sparse_patch> patches = patches_of(model, deltas, f.patch_bytes);
  f.check_s = time_patch_check(patches);
  // The limits: one thread copying the patches' arrays, and the model's tensors.
  std::vector<unsigned char> sink(std::max(f.patch_bytes, model.total()), 1);
  f.patch_copy_s = patch_copy_seconds(sink, deltas);
  f.model_copy_s = model_copy_seconds(sink, model);

  // Rounds: dense packed nccl, then 1 % patches, each from the same model state.
  f.dense_s = time_dense_rounds(model, a.rounds);
  f.sparse_s = time_sparse_rounds(model, a.fraction, a.rounds);
  print_figures(f, count, model, a.fraction);
  return 0;
}
