// wt_test_trainer: a trainer process for cross-process tests. It syncs the deterministic test
// model (support/model.hpp) to a receiver over HTTP for a number of rounds, perturbing it between
// rounds, optionally as one rank of a multi-process trainer group, optionally from CUDA memory or
// from a /dev/shm file.
#include <wt/gloo_trainer_group.hpp>
#include <wt/http_client.hpp>
#include <wt/wt.hpp>

#include "support/model.hpp"
#include "support/shm_file_source.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#ifdef WT_TEST_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <atomic>
#include <thread>

namespace {

// Counts the RPCs this process makes, to show which rank talks to the workers. For fault tests it
// can stop for good just before one call of a given round ("paused before <call>", then sleep
// until killed), so a test kills the process at a known phase.
class CountingClient : public wt::Client {
 public:
  explicit CountingClient(wt::Client& inner) : inner_(inner) {}
  void init_weight_transfer_engine(std::string_view j) override {
    pause_if("init"), ++calls, inner_.init_weight_transfer_engine(j);
  }
  void start_weight_update() override {
    ++round;
    updates_this_round = 0;
    pause_if("start"), ++calls, inner_.start_weight_update();
  }
  void update_weights(std::string_view j) override {
    if (updates_this_round++ == pause_update) pause_if("update");
    ++calls, inner_.update_weights(j);
  }
  void finish_weight_update(const std::optional<std::string>& v) override {
    pause_if("finish"), ++calls, inner_.finish_weight_update(v);
  }
  std::atomic<int> calls{0};
  int round = -1;  // counts starts: the round being sent
  std::string pause_before;
  int pause_round = 0, pause_update = 0, pause_ms = -1;  // pause_ms < 0: forever
  int updates_this_round = 0;

 private:
  void pause_if(const char* call) {
    if (pause_before != call || std::max(round, 0) != pause_round) return;
    fmt::print("paused before {}\n", call);
    std::fflush(stdout);
    if (pause_ms >= 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    else
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  wt::Client& inner_;
};

#ifdef WT_TEST_WITH_CUDA
// The same model in CUDA memory, written afresh each pass: by default every tensor in its own
// cudaMalloc allocation, written synchronously. one_allocation: all of them back to back in one
// allocation, 2-byte aligned (one handle shared by many tensors at odd offsets). stream: written
// with cudaMemcpyAsync on a non-blocking stream held back by a large memset queued before, so the
// bytes are right only if the engine waits for that stream (SendOptions::stream).
class CudaSource : public wt::WeightSource {
 public:
  CudaSource(wt::test::VectorSource& host, bool one_allocation, bool use_stream, bool pool)
      : host_(host), one_allocation_(one_allocation), pool_(pool) {
    if (use_stream) {
      check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      check(cudaMalloc(&scratch_, kScratch), "cudaMalloc scratch");
    }
  }
  ~CudaSource() override {
    release();
    if (stream_) cudaStreamDestroy(stream_);
    if (scratch_) cudaFree(scratch_);
  }
  cudaStream_t stream() const { return stream_; }
  const std::vector<wt::ParamMeta>& metadata() override { return host_.metadata(); }
  void begin() override {
    release();
    host_.begin();
    if (one_allocation_) {
      std::size_t total = 0;
      for (auto& t : host_.tensors()) total += (t.bytes.size() + 1) / 2 * 2;
      check(cudaMalloc(&block_, total ? total : 1), "cudaMalloc");
    }
    if (stream_) cudaMemsetAsync(scratch_, 0x5a, kScratch, stream_);  // holds the stream back
  }
  bool next(wt_tensor& out) override {
    if (!host_.next(out)) return false;
    auto& t = host_.tensors()[count_++];
    void* d = nullptr;
    if (one_allocation_) {
      d = static_cast<char*>(block_) + offset_;
      offset_ += (t.bytes.size() + 1) / 2 * 2;
    } else if (pool_) {  // stream-ordered pool memory: CUDA IPC cannot share it
      check(cudaMallocAsync(&d, t.bytes.size() ? t.bytes.size() : 1, nullptr), "cudaMallocAsync");
      check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
      ptrs_.push_back(d);
    } else {
      check(cudaMalloc(&d, t.bytes.size() ? t.bytes.size() : 1), "cudaMalloc");
      ptrs_.push_back(d);
    }
    if (stream_)
      check(cudaMemcpyAsync(d, t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync");
    else
      check(cudaMemcpy(d, t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    out.tensor.data = d;
    out.tensor.device = {kDLCUDA, 0};
    return true;
  }
  void end() override { host_.end(); }

 private:
  static constexpr std::size_t kScratch = std::size_t{256} << 20;
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
  }
  void release() {
    if (stream_) cudaStreamSynchronize(stream_);
    for (void* p : ptrs_) pool_ ? cudaFreeAsync(p, nullptr) : cudaFree(p);
    if (pool_) cudaStreamSynchronize(nullptr);
    ptrs_.clear();
    if (block_) cudaFree(block_);
    block_ = nullptr;
    offset_ = count_ = 0;
  }
  wt::test::VectorSource& host_;
  bool one_allocation_;
  bool pool_;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  void* block_ = nullptr;
  std::size_t offset_ = 0, count_ = 0;
  std::vector<void*> ptrs_;
};
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wt test trainer"};
  std::string url, rendezvous;
  bool packed = false, cuda = false, in_shm = false, cuda_one_allocation = false,
       cuda_stream = false, cuda_pool = false;
  int64_t buffer_bytes = 1 << 20;
  int rounds = 3, rank = 0, group_rank = 0, group_size = 1, layers = 40, width = 64, delay_ms = 0;
  uint32_t seed = 0;
  app.add_option("--url", url)->required();
  app.add_flag("--packed", packed);
  app.add_option("--buffer-bytes", buffer_bytes);
  app.add_option("--rounds", rounds);
  app.add_option("--rank", rank, "init-info rank (0 sends)");
  app.add_option("--group-rank", group_rank);
  app.add_option("--group-size", group_size);
  app.add_option("--rendezvous-dir", rendezvous);
  app.add_option("--layers", layers);
  app.add_option("--width", width);
  app.add_option("--seed", seed);
  app.add_option("--delay-ms", delay_ms, "sleep between rounds");
  app.add_flag("--cuda", cuda, "send from CUDA memory");
  app.add_flag("--cuda-one-allocation", cuda_one_allocation,
               "with --cuda: every tensor in one allocation, at 2-byte offsets");
  app.add_flag("--cuda-pool", cuda_pool,
               "with --cuda: tensors from cudaMallocAsync (not shareable)");
  app.add_flag("--cuda-stream", cuda_stream,
               "with --cuda: write the tensors on a held-back non-blocking stream, named to send");
  app.add_flag("--weights-in-shm", in_shm, "keep the weights in a /dev/shm file");
  std::string pause_before;
  int pause_round = 0, pause_update = 0, pause_ms = -1, group_timeout_s = 30, http_timeout_s = 300;
  app.add_option("--pause-before", pause_before, "init|start|update|finish: stop there, forever")
      ->check(CLI::IsMember({"init", "start", "update", "finish"}));
  app.add_option("--pause-round", pause_round, "the round of --pause-before (0-based)");
  app.add_option("--pause-update", pause_update, "with update: before which update of the round");
  app.add_option("--pause-ms", pause_ms, "pause this long, then go on (default: forever)");
  app.add_option("--group-timeout-s", group_timeout_s);
  app.add_option("--http-timeout-s", http_timeout_s);
  CLI11_PARSE(app, argc, argv);
  try {
    wt::test::VectorSource source;
    wt::test::fill_model(source, layers, width, seed);
    wt::WeightSource* src = &source;
    std::unique_ptr<wt::test::ShmFileSource> shm_source;
    if (in_shm) src = (shm_source = std::make_unique<wt::test::ShmFileSource>(source)).get();
#ifdef WT_TEST_WITH_CUDA
    std::unique_ptr<CudaSource> cuda_source;
    if (cuda)
      src = (cuda_source =
                 std::make_unique<CudaSource>(source, cuda_one_allocation, cuda_stream, cuda_pool))
                .get();
#else
    if (cuda) throw wt::Error(WT_ERR_UNSUPPORTED, "this helper was built without CUDA");
#endif
    wt::HttpClient::Options hopts;
    hopts.timeout = std::chrono::seconds(http_timeout_s);
    wt::HttpClient http(url, hopts);
    CountingClient client(http);
    client.pause_before = pause_before;
    client.pause_round = pause_round;
    client.pause_update = pause_update;
    client.pause_ms = pause_ms;
    std::unique_ptr<wt::TrainerGroup> group;
    if (group_size > 1)
      group = wt::make_gloo_trainer_group(group_rank, group_size, rendezvous,
                                          std::chrono::seconds(group_timeout_s));
    auto info = wt::InitInfo::from_object({{"backend", "ipc"},
                                           {"rank", rank},
                                           {"packed", packed},
                                           {"packed_buffer_size_bytes", buffer_bytes}});
    auto engine = wt::trainer_init(info, client, src, group.get());
    for (int r = 0; r < rounds; ++r) {
      wt::SendOptions opts;
      opts.weight_version = fmt::format("step-{}", r);
#ifdef WT_TEST_WITH_CUDA
      if (cuda_source) opts.stream = cuda_source->stream();
#endif
      engine->send_weights(opts);
      fmt::print("round {} ok\n", r);
      std::fflush(stdout);
      if (r + 1 < rounds) source.perturb(static_cast<uint32_t>(r));
      if (delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    }
    fmt::print("rpc_calls={}\n", client.calls.load());
    return 0;
  } catch (const std::exception& e) {
    fmt::print("error: {}\n", e.what());
    return 1;
  }
}
