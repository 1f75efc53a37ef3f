// wt_test_cuda_receiver: `wt serve --device cuda:N` for GPU tests that must look inside the load:
// the reference receiver over HTTP with the CUDA host staging, wrapped so that every tensor the
// worker hands over is checked (--require-alignment: its device address is a multiple of N bytes,
// or the update fails naming it) or held up (--slow-copy-ms: the first copy waits that long,
// "copy started" printed, so a test can act while a load is in progress; --hold-stream-ms: each
// copy runs that long after it was queued, as a consumer's asynchronous copies do).
#include <wt/services/cuda_host_staging.hpp>
#include <wt/error.hpp>
#include <wt/services/http_server.hpp>
#include <wt/services/receiver.hpp>
#include <wt/sdk/cuda_driver.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <thread>

namespace {

class CheckingStaging : public wt::Receiver::DeviceStaging {
 public:
  CheckingStaging(std::shared_ptr<DeviceStaging> inner, unsigned alignment, int slow_ms,
                  int hold_ms)
      : inner_(std::move(inner)), alignment_(alignment), slow_ms_(slow_ms), hold_ms_(hold_ms) {}
  void* allocate_host(std::size_t n) override { return inner_->allocate_host(n); }
  void free_host(void* p) noexcept override { inner_->free_host(p); }
  void copy_to_host(void* dst, const DLTensor& src, std::size_t n) override {
    const auto address = reinterpret_cast<uintptr_t>(src.data) + src.byte_offset;
    if (alignment_ > 1 && address % alignment_ != 0)
      throw wt::Error(WT_ERR_INVALID_ARGUMENT,
                      fmt::format("misaligned: a tensor of {} bytes at device address {:#x} is not "
                                  "{}-byte aligned",
                                  n, address, alignment_));
    if (slow_ms_ > 0 && !announced_) {  // the first copy only
      announced_ = true;
      std::printf("copy started\n");
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms_));
    }
    // Holds the stream back before the copy: it runs long after this call returned, so a worker
    // that answers the update without waiting for the stream lets the trainer refill what the
    // copy has yet to read.
    if (hold_ms_ > 0) {
      static const auto launch =
          wt::sdk::cuda::driver().entry<PFN_cuLaunchHostFunc_v10000>("cuLaunchHostFunc");
      if (launch == nullptr) throw wt::Error(WT_ERR_UNSUPPORTED, "no cuLaunchHostFunc");
      wt::sdk::cuda::DeviceGuard g(src.device.device_id);
      wt::sdk::cuda::check(
          launch(
              static_cast<CUstream>(inner_->stream()),
              [](void* ms) {
                std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms)));
              },
              &hold_ms_),
          "cuLaunchHostFunc");
    }
    inner_->copy_to_host(dst, src, n);
  }
  void* stream() const override { return inner_->stream(); }
  void synchronize() override { inner_->synchronize(); }

 private:
  std::shared_ptr<DeviceStaging> inner_;
  unsigned alignment_;
  int slow_ms_;
  int hold_ms_;
  bool announced_ = false;
};

volatile std::sig_atomic_t g_stop = 0;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wt test CUDA receiver"};
  int port = 0, device = 0, slow_ms = 0, hold_ms = 0;
  unsigned alignment = 0;
  std::string backend = "ipc", serve;
  app.add_option("command", serve, "ignored ('serve', as cli::start_server passes)");
  app.add_option("--port", port);
  app.add_option("--backend", backend);
  app.add_option("--cuda-device", device);
  app.add_option("--require-alignment", alignment);
  app.add_option("--slow-copy-ms", slow_ms, "the first copy waits this long first");
  app.add_option("--hold-stream-ms", hold_ms, "each copy runs this long after it was queued");
  CLI11_PARSE(app, argc, argv);
  try {
    wt::Receiver::Options ropts;
    ropts.backend = backend;
    ropts.device = {kDLCUDA, device};
    ropts.device_staging = std::make_shared<CheckingStaging>(wt::make_cuda_host_staging(device),
                                                             alignment, slow_ms, hold_ms);
    wt::Receiver receiver(ropts);
    wt::HttpServer::Options sopts;
    sopts.port = port;
    wt::HttpServer server(receiver, sopts);
    server.start();
    std::signal(SIGTERM, [](int) { g_stop = 1; });
    std::printf("wt_test_cuda_receiver: listening on %s (cuda:%d)\n", server.url().c_str(), device);
    std::fflush(stdout);
    while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return 0;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
}
