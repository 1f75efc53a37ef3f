// wt_test_trainer: a trainer process for cross-process tests. It syncs the deterministic test
// model (support/model.hpp) to a receiver over HTTP for a number of rounds, perturbing it between
// rounds, optionally as one rank of a multi-process trainer group, optionally from CUDA memory or
// from a /dev/shm file.
#include <wt/services/fan_out_client.hpp>
#include <wt/services/gloo_trainer_group.hpp>
#include <wt/services/http_client.hpp>
#include <wt/wt.hpp>

#include "support/model.hpp"
#include "support/shm_file_source.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#ifdef WT_TEST_WITH_CUDA
#include <wt/sdk/cuda_driver.hpp>

#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
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
  // Interruptions reach the receivers' clients (an engine that gives up its init, or aborts).
  void abort_calls() override { inner_.abort_calls(); }
  void abandon_calls() override { inner_.abandon_calls(); }
  std::atomic<int> calls{0};
  int round = -1;  // counts starts: the round being sent
  std::string pause_before;
  int pause_round = 0, pause_update = 0, pause_ms = -1;  // pause_ms < 0: forever
  // update_weights runs on the engine's side thread, and on the caller's when a failed round is
  // ended (the default end_weight_update is a refused update).
  std::atomic<int> updates_this_round{0};

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

// Forwards a source; in round `round` it stops before yielding tensor `tensor` ("paused at
// tensor K" printed), for `ms` milliseconds or for good, so a test can kill a peer mid-transfer.
class PausingSource : public wt::WeightSource {
 public:
  PausingSource(wt::WeightSource& inner, int round, int tensor, int ms)
      : inner_(inner), round_(round), tensor_(tensor), ms_(ms) {}
  const std::vector<wt::ParamMeta>& metadata() override { return inner_.metadata(); }
  void begin() override {
    ++pass_;
    index_ = 0;
    inner_.begin();
  }
  bool next(wt_tensor& out) override {
    if (pass_ == round_ && index_++ == tensor_) {
      fmt::print("paused at tensor {}\n", tensor_);
      std::fflush(stdout);
      if (ms_ >= 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
      else
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
    }
    return inner_.next(out);
  }
  void end() override { inner_.end(); }

 private:
  wt::WeightSource& inner_;
  int round_, tensor_, ms_;
  int pass_ = -1, index_ = 0;
};

#ifdef WT_TEST_WITH_CUDA
// One allocation from the driver's virtual memory management (cuMemCreate + cuMemMap), as
// PyTorch's expandable segments make: CUDA IPC handles cannot share it.
class VmmAllocation {
 public:
  explicit VmmAllocation(std::size_t size) {
    cudaFree(nullptr);  // the runtime makes device 0's primary context current on this thread
    const auto& d = wt::sdk::cuda::driver();
    auto fn = [&](auto& slot, const char* name) {
      slot = d.entry<std::remove_reference_t<decltype(slot)>>(name);
      if (slot == nullptr) throw std::runtime_error(std::string("the driver lacks ") + name);
    };
    fn(create_, "cuMemCreate"), fn(reserve_, "cuMemAddressReserve"), fn(map_, "cuMemMap"),
        fn(access_, "cuMemSetAccess"), fn(granularity_, "cuMemGetAllocationGranularity"),
        fn(unmap_, "cuMemUnmap"), fn(free_, "cuMemAddressFree"), fn(release_, "cuMemRelease");
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    std::size_t g = 0;
    check(granularity_(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
          "cuMemGetAllocationGranularity");
    size_ = (std::max<std::size_t>(size, 1) + g - 1) / g * g;
    check(create_(&handle_, size_, &prop, 0), "cuMemCreate");
    check(reserve_(&ptr_, size_, 0, 0, 0), "cuMemAddressReserve");
    check(map_(ptr_, size_, 0, handle_, 0), "cuMemMap");
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check(access_(ptr_, size_, &access, 1), "cuMemSetAccess");
  }
  ~VmmAllocation() {
    unmap_(ptr_, size_);
    free_(ptr_, size_);
    release_(handle_);
  }
  void* data() const { return reinterpret_cast<void*>(ptr_); }

 private:
  static void check(CUresult r, const char* what) {
    if (r != CUDA_SUCCESS)
      throw std::runtime_error(std::string(what) + " failed: " + std::to_string(r));
  }
  PFN_cuMemCreate_v10020 create_{};
  PFN_cuMemAddressReserve_v10020 reserve_{};
  PFN_cuMemMap_v10020 map_{};
  PFN_cuMemSetAccess_v10020 access_{};
  PFN_cuMemGetAllocationGranularity_v10020 granularity_{};
  PFN_cuMemUnmap_v10020 unmap_{};
  PFN_cuMemAddressFree_v10020 free_{};
  PFN_cuMemRelease_v10020 release_{};
  CUmemGenericAllocationHandle handle_{};
  CUdeviceptr ptr_ = 0;
  std::size_t size_ = 0;
};

// The same model in CUDA memory, written afresh each pass: by default every tensor in its own
// cudaMalloc allocation, written synchronously. one_allocation: all of them back to back in one
// allocation, 2-byte aligned (one handle shared by many tensors at odd offsets); vmm: the same in
// a cuMemCreate allocation. stream: written with cudaMemcpyAsync on a non-blocking stream held
// back 300 ms by a host function queued first, so the bytes are right only if the engine waits for
// that
// stream (SendOptions::stream). Zero-element tensors have null data, as PyTorch gives them.
class CudaSource : public wt::WeightSource {
 public:
  CudaSource(wt::test::VectorSource& host, bool one_allocation, bool use_stream, bool pool,
             bool vmm)
      : host_(host), one_allocation_(one_allocation || vmm), pool_(pool), vmm_(vmm) {
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
      if (vmm_)
        block_ = (vmm_block_ = std::make_unique<VmmAllocation>(total))->data();
      else
        check(cudaMalloc(&block_, total ? total : 1), "cudaMalloc");
    }
    if (stream_) {  // holds the stream back 300 ms: the copies queued after it land that late
      cudaMemsetAsync(scratch_, 0x5a, kScratch, stream_);
      check(cudaLaunchHostFunc(
                stream_, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); },
                nullptr),
            "cudaLaunchHostFunc");
    }
  }
  bool next(wt_tensor& out) override {
    if (!host_.next(out)) return false;
    auto& t = host_.tensors()[count_++];
    void* d = nullptr;
    if (t.bytes.empty()) {
      out.tensor.data = nullptr;
      out.tensor.device = {kDLCUDA, 0};
      return true;
    }
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
    if (block_ && !vmm_) cudaFree(block_);
    vmm_block_.reset();
    block_ = nullptr;
    offset_ = count_ = 0;
  }
  wt::test::VectorSource& host_;
  bool one_allocation_;
  bool pool_;
  bool vmm_;
  std::unique_ptr<VmmAllocation> vmm_block_;
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
  std::vector<std::string> urls;
  std::string rendezvous, backend = "ipc", extra_init_info;
  bool packed = false, cuda = false, in_shm = false, cuda_one_allocation = false,
       cuda_stream = false, cuda_pool = false, cuda_vmm = false, edge = false;
  int64_t buffer_bytes = 1 << 20;
  int rounds = 3, rank = 0, group_rank = 0, group_size = 1, layers = 40, width = 64, delay_ms = 0;
  uint32_t seed = 0;
  app.add_option("--url", urls, "a receiver; several: every call goes to all (FanOutClient)")
      ->required();
  app.add_option("--backend", backend);
  app.add_option("--init-info", extra_init_info, "a JSON object of init-info fields to add");
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
  app.add_flag("--cuda-vmm", cuda_vmm,
               "with --cuda: every tensor in one cuMemCreate allocation (not shareable)");
  app.add_flag("--edge-tensors", edge, "the model starts with bf16[3], f32[5] and empty tensors");
  app.add_flag("--weights-in-shm", in_shm, "keep the weights in a /dev/shm file");
  std::string pause_before;
  int pause_round = 0, pause_update = 0, pause_ms = -1, group_timeout_s = 30, http_timeout_s = 300;
  app.add_option("--pause-before", pause_before, "init|start|update|finish: stop there, forever")
      ->check(CLI::IsMember({"init", "start", "update", "finish"}));
  app.add_option("--pause-round", pause_round, "the round of --pause-before (0-based)");
  app.add_option("--pause-update", pause_update, "with update: before which update of the round");
  app.add_option("--pause-ms", pause_ms, "pause this long, then go on (default: forever)");
  int pause_tensor = -1;
  app.add_option("--pause-at-tensor", pause_tensor,
                 "stop the source before yielding this tensor of round --pause-round (the engine "
                 "is mid-transfer then), as --pause-before does");
  app.add_option("--group-timeout-s", group_timeout_s);
  app.add_option("--http-timeout-s", http_timeout_s);
  std::string token;
  app.add_option("--token", token, "the receivers' bearer token");
  CLI11_PARSE(app, argc, argv);
  try {
    wt::test::VectorSource source;
    wt::test::fill_model(source, layers, width, seed, edge);
    wt::WeightSource* src = &source;
    std::unique_ptr<wt::test::ShmFileSource> shm_source;
    if (in_shm) src = (shm_source = std::make_unique<wt::test::ShmFileSource>(source)).get();
#ifdef WT_TEST_WITH_CUDA
    std::unique_ptr<CudaSource> cuda_source;
    if (cuda)
      src = (cuda_source = std::make_unique<CudaSource>(source, cuda_one_allocation, cuda_stream,
                                                        cuda_pool, cuda_vmm))
                .get();
#else
    if (cuda) throw wt::Error(WT_ERR_UNSUPPORTED, "this helper was built without CUDA");
#endif
    wt::HttpClient::Options hopts;
    hopts.timeout = std::chrono::seconds(http_timeout_s);
    hopts.bearer_token = token;
    std::vector<std::unique_ptr<wt::HttpClient>> https;
    std::vector<wt::FanOutClient::Replica> replicas;
    for (const auto& u : urls) {
      https.push_back(std::make_unique<wt::HttpClient>(u, hopts));
      replicas.push_back({https.back().get(), 1, u});
    }
    wt::FanOutClient fan_out(replicas);
    CountingClient client(fan_out);
    PausingSource pausing(*src, pause_round, pause_tensor, pause_ms);
    if (pause_tensor >= 0) src = &pausing;
    client.pause_before = pause_before;
    client.pause_round = pause_round;
    client.pause_update = pause_update;
    client.pause_ms = pause_ms;
    std::unique_ptr<wt::TrainerGroup> group;
    if (group_size > 1)
      group = wt::make_gloo_trainer_group(group_rank, group_size, rendezvous,
                                          std::chrono::seconds(group_timeout_s));
    nlohmann::json fields = {{"backend", backend},
                             {"rank", rank},
                             {"packed", packed},
                             {"packed_buffer_size_bytes", buffer_bytes}};
    if (!extra_init_info.empty()) fields.update(nlohmann::json::parse(extra_init_info));
    auto info = wt::InitInfo::from_object(fields);
    auto engine = wt::trainer_init(info, client, src, group.get());
    for (int r = 0; r < rounds; ++r) {
      wt::SendOptions opts;
      opts.weight_version = fmt::format("step-{}", r);
#ifdef WT_TEST_WITH_CUDA
      if (cuda_source) opts.stream = cuda_source->stream();
#endif
      const auto t0 = std::chrono::steady_clock::now();
      engine->send_weights(opts);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fmt::print("round {} ok in {:.3f} s, {:.2f} GB/s\n", r, s, source.total_bytes() / s / 1e9);
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
