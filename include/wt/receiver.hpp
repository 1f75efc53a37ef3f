// The inference side of a weight sync, as the reference receiver (`wt serve`) and the in-process
// client run it: vLLM's session rules around a lazily created worker engine, plus the received
// weights themselves, in host memory, with per-tensor checksums.
//
// Session rules (vLLM's): start while a session is active is refused; update or finish without
// one is refused; any failed update ends the session. Weights loaded during a round are staged
// and become visible at finish, so a failed round leaves the weights exactly as they were; a new
// init or start discards whatever an earlier, unfinished round staged.
#pragma once

#include <wt/engine.hpp>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace wt {

class Receiver {
 public:
  struct Options {
    std::string backend;  // which plugin's worker engine to create at init
    DLDevice device{kDLCPU, 0};
    // Copies `n` bytes of a received device tensor into host memory; needed when `device` is not
    // the CPU (wt serve provides it when built with CUDA).
    std::function<void(void* dst, const DLTensor& src, std::size_t n)> device_to_host;
    // Threads that copy received host tensors into place (a batch under 32 MiB uses one);
    // 0: the hardware's thread count, at most 8.
    unsigned load_threads = 0;
    // Receiver-side options for the backend's worker engine (a JSON object), e.g. the backend
    // keys of `wt serve --weight-transfer-config`.
    nlohmann::json backend_options = nlohmann::json::object();
  };
  struct Tensor {
    DLDataType dtype{};
    std::vector<int64_t> shape;
    // Host memory from mmap, with transparent huge pages requested for large tensors.
    struct Unmap {
      std::size_t size;
      void operator()(unsigned char* p) const;
    };
    std::unique_ptr<unsigned char, Unmap> data{nullptr, Unmap{0}};
    std::size_t nbytes = 0;
  };

  explicit Receiver(Options options);
  // Host memory, the given backend.
  explicit Receiver(const std::string& backend);
  ~Receiver();

  // The four control-plane calls; throw wt::Error (WT_ERR_STATE for session-rule violations).
  // The JSON is taken by value (move it in): it is turned into the engine's text and freed before
  // the engine parses that text, so a large payload is not held twice.
  void init_weight_transfer_engine(nlohmann::json init_info);
  void start_weight_update();
  // One update_info object, or a list with one object per worker (this receiver is one worker).
  void update_weights(nlohmann::json update_info);
  void finish_weight_update(const std::optional<std::string>& weight_version);
  // Ends the current update, if any: the engine is aborted, what the round staged is dropped, the
  // session ends (the next start is accepted). The committed weights stay as they were.
  void end_weight_update(const std::string& reason);

  const std::string& backend() const { return options_.backend; }
  unsigned load_threads() const { return load_threads_; }
  int world_size() const { return 1; }
  std::optional<std::string> weight_version() const;
  void set_weight_version(const std::string& version);
  bool session_active() const;
  // name -> XXH3-64 hex of the committed weights.
  std::map<std::string, std::string> checksums() const;
  // Copies of committed tensors, for tests and tools.
  std::vector<std::string> names() const;
  std::optional<std::vector<unsigned char>> bytes_of(const std::string& name) const;
  uint64_t committed_bytes() const;
  uint64_t rounds_finished() const;
  // Tensors a worker engine wrote straight into this receiver's memory (the loader's destination
  // path) rather than handing them to load(), since creation.
  uint64_t tensors_written_in_place() const { return written_in_place_.load(); }

 private:
  class RoundLoader;  // the Loader a round's receive() calls: copies, destinations, patches
  uint64_t load(std::span<const wt_tensor> tensors);           // returns the bytes copied
  void discard_staged();                                       // staged tensors become spares
  Tensor take_slot(const std::string& name, uint64_t nbytes);  // a spare of that size, or new

  Options options_;
  unsigned load_threads_;
  // Two locks, so that readers never wait on a transfer: session_mu_ serialises the control-plane
  // calls (and guards engine_, staged_, spare_) for as long as the engine works; state_mu_ guards
  // what readers see (committed_, version_, rounds_) and is only held briefly.
  std::mutex session_mu_;
  mutable std::mutex state_mu_;
  std::unique_ptr<WorkerEngine> engine_;
  std::atomic<bool> active_{false};
  std::atomic<uint64_t> written_in_place_{0};
  std::map<std::string, Tensor> staged_, spare_;
  std::map<std::string, Tensor> committed_;
  std::optional<std::string> version_;
  uint64_t rounds_ = 0;
};

// A client that drives a Receiver in this process: for embedded workers and tests.
class InProcessClient : public Client {
 public:
  explicit InProcessClient(Receiver& receiver) : r_(receiver) {}
  void init_weight_transfer_engine(std::string_view init_info_json) override;
  void start_weight_update() override;
  void update_weights(std::string_view update_info_json) override;
  void finish_weight_update(const std::optional<std::string>& weight_version) override;
  void end_weight_update(std::string_view reason) override;

 private:
  Receiver& r_;
};

}  // namespace wt
