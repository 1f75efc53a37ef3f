// A small inference engine that embeds wt's receiving side: it owns its weights, and wt serves
// vLLM's weight-transfer routes over them (wt::EngineSession behind wt::HttpServer, with vLLM's
// session rules) while the backend's worker engine writes each round straight into the engine's
// memory. Two buffers per parameter, live and next: a round is written into `next` and swapped in
// at commit, so a round that does not finish never shows.
//
//   engine --backend nccl --port 8000        # then: wt launch with receiver.url at that port
//
// docs/engines.md walks through it; tests/example_engine_test.sh runs it under `wt launch`.
#include <wt/checksum.hpp>
#include <wt/dtype.hpp>
#include <wt/error.hpp>
#include <wt/services/engine_session.hpp>
#include <wt/services/http_server.hpp>

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

// One parameter as the engine keeps it: host memory, compact row-major.
struct Param {
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::vector<unsigned char> live, next;
  // A DLTensor over one of the buffers (DLPack's pointers are not const; nothing writes here).
  DLTensor view(const std::vector<unsigned char>& bytes) const {
    return DLTensor{const_cast<unsigned char*>(bytes.data()),
                    {kDLCPU, 0},
                    static_cast<int32_t>(shape.size()),
                    dtype,
                    const_cast<int64_t*>(shape.data()),
                    nullptr,
                    0};
  }
};

// Where the worker engine writes a round: each parameter's `next` buffer, made at first sight.
class Model final : public wt::EngineMemory {
 public:
  std::optional<DLTensor> destination(const wt::ParamMeta& p) override {
    std::lock_guard<std::mutex> l(mu_);  // checksums() may be asked meanwhile
    Param& slot = params_[p.name];
    std::size_t bytes = wt::element_size(p.dtype);
    for (int64_t d : p.shape) bytes *= static_cast<std::size_t>(d);
    if (slot.next.size() != bytes || slot.shape != p.shape || !(slot.dtype == p.dtype)) {
      slot.dtype = p.dtype;
      slot.shape = p.shape;
      slot.next.assign(bytes, 0);
      slot.live.resize(bytes);
    }
    return slot.view(slot.next);
  }
  void written(const std::string& name) override { written_.push_back(name); }
  void load(std::span<const wt_tensor>) override {  // only for what had no destination
    throw wt::Error(WT_ERR_UNSUPPORTED, "this engine takes every tensor in place");
  }
  void commit() override {  // the round finished: what it wrote becomes live
    std::lock_guard<std::mutex> l(mu_);
    for (const std::string& name : written_) std::swap(params_[name].live, params_[name].next);
    written_.clear();
  }
  void discard() override { written_.clear(); }
  std::map<std::string, std::string> checksums() const override {
    std::lock_guard<std::mutex> l(mu_);
    std::map<std::string, std::string> sums;
    for (const auto& [name, p] : params_) sums[name] = wt::checksum_tensor(p.view(p.live));
    return sums;
  }

 private:
  mutable std::mutex mu_;  // params_ is read by checksums() from the server's threads
  std::map<std::string, Param> params_;
  std::vector<std::string> written_;  // filled this round
};

int main(int argc, char** argv) {
  std::string backend = "nccl";
  int port = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--backend") backend = argv[i + 1];
    if (flag == "--port") port = std::stoi(argv[i + 1]);
  }
  sigset_t stop;  // served until SIGINT or SIGTERM, blocked before any thread starts
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  Model model;
  wt::EngineSession session(backend, model);
  wt::HttpServer::Options options;
  options.port = port;
  wt::HttpServer server(session, options);
  server.start();
  std::printf("engine: listening on %s (backend %s)\n", server.url().c_str(), backend.c_str());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop, &signal);
}
