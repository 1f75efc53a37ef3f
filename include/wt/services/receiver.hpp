// The inference side of a weight sync, as the reference receiver (`wt serve`) and the in-process
// client run it: vLLM's session rules around a lazily created worker engine, plus the received
// weights themselves, in host memory, with per-tensor checksums.
//
// Session rules (vLLM's): start while a session is active is refused; update or finish without
// one is refused; any failed update ends the session. Weights loaded during a round are staged
// and become visible at finish, so a failed round leaves the weights exactly as they were; a new
// init or start discards whatever an earlier, unfinished round staged.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/engine.hpp>
#include <wt/weight_source.hpp>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace wt {

namespace detail {
class StagingArena;
}

class Receiver {
 public:
  // How a receiver whose worker maps device memory brings tensors to host memory: copies queued on
  // one stream into host memory it allocates (pinned, so the copies are asynchronous). The worker
  // engine is given stream() and waits for it before it answers an update (ABI 2); the receiver
  // synchronises once per round, before the round's tensors become visible or are dropped.
  // make_cuda_host_staging() (wt/services/cuda_host_staging.hpp) is the CUDA one.
  class DeviceStaging {
   public:
    virtual ~DeviceStaging() = default;
    virtual void* allocate_host(std::size_t n) = 0;
    virtual void free_host(void* p) noexcept = 0;
    // Queues a copy of n bytes of `src` (data + byte_offset) to dst, memory from allocate_host.
    virtual void copy_to_host(void* dst, const DLTensor& src, std::size_t n) = 0;
    // The stream the copies are queued on (cudaStream_t for CUDA), or nullptr.
    virtual void* stream() const = 0;
    // Returns when every queued copy is done.
    virtual void synchronize() = 0;
  };

  struct Options {
    std::string backend;  // which plugin's worker engine to create at init
    DLDevice device{kDLCPU, 0};
    // Needed when `device` is not the CPU (wt serve makes a CUDA one when built with CUDA).
    std::shared_ptr<DeviceStaging> device_staging;
    // Threads that copy received host tensors into place (a batch under 32 MiB uses one);
    // 0: the hardware's thread count, at most 8.
    unsigned load_threads = 0;
    // Receiver-side options for the backend's worker engine (a JSON object), e.g. the backend
    // keys of `wt serve --weight-transfer-config`.
    nlohmann::json backend_options = nlohmann::json::object();
    // The bytes of the model the trainer will send, when known (`wt serve --expect-model-bytes`;
    // `wt launch` passes its checkpoint's): the staging memory of the first two rounds (each
    // round stages a full copy before its commit) is faulted in by the constructor, so that the
    // first rounds cost what later ones do. 0: the first round faults its own memory, and the
    // second round's is prepared in the background once the first commits.
    uint64_t expect_model_bytes = 0;
    // Called by each finish_weight_update once the round is committed, before it returns, with
    // the round's tensors as committed (whole tensors it staged, tensors its patches changed),
    // host memory valid during the call: an inference engine that keeps its own model copies
    // them in, so that a round that does not finish never reaches the engine's parameters. No
    // round can start during the call. An exception it throws fails the finish call (the trainer
    // hears it); the receiver's weights stay committed.
    std::function<void(std::span<const wt_tensor>)> on_commit;
  };
  struct Tensor {
    DLDataType dtype{};
    std::vector<int64_t> shape;
    // Host memory cut from the receiver's staging arena (tensors staged one after another lie
    // back to back), or pinned memory from the device staging (for receivers of device tensors).
    std::shared_ptr<unsigned char> data;
    std::size_t nbytes = 0;
  };
  using TensorMap = std::unordered_map<std::string, Tensor>;

  explicit Receiver(Options options);
  // Host memory, the given backend.
  explicit Receiver(const std::string& backend);
  ~Receiver();

  // The control-plane calls; throw wt::Error (WT_ERR_STATE for session-rule violations).
  // The JSON is taken by value (move it in): it is turned into the engine's text and freed before
  // the engine parses that text, so a large payload is not held twice.
  void init_weight_transfer_engine(nlohmann::json init_info);
  void start_weight_update();
  // One update_info object, or a list with one object per worker (this receiver is one worker).
  void update_weights(nlohmann::json update_info);
  // The same from JSON text: an object goes to the engine as it is (the engine's own bounded
  // parser reads it: no parse and re-serialisation here); anything else is parsed as above.
  void update_weights_text(std::string_view update_info_json);
  void finish_weight_update(const std::optional<std::string>& weight_version);
  // Ends the current update, if any: the engine is aborted at once, from this thread, so an update
  // call blocked in a transfer returns (with WT_ERR_ABORTED); then, when it has, what the round
  // staged is dropped and the session ends (the next start is accepted). The committed weights stay
  // as they were.
  void end_weight_update(const std::string& reason);

  // Commits every tensor of `source` (host memory) as the weights before any round, as an
  // inference server starts from its checkpoint: what delta patches then apply to. Refused while a
  // session is active. Weight version "base".
  void load_base(WeightSource& source);

  const std::string& backend() const { return options_.backend; }
  unsigned load_threads() const { return load_threads_; }
  int world_size() const { return 1; }
  std::optional<std::string> weight_version() const;
  void set_weight_version(const std::string& version);
  bool session_active() const;
  // name -> XXH3-64 hex of the committed weights.
  std::map<std::string, std::string> checksums() const;
  // Copies of committed tensors, for tests and tools. names() is sorted.
  std::vector<std::string> names() const;
  std::optional<std::vector<unsigned char>> bytes_of(const std::string& name) const;
  struct TensorCopy {
    DLDataType dtype{};
    std::vector<int64_t> shape;
    std::vector<unsigned char> bytes;
  };
  // A committed tensor with its dtype and shape, copied (the next round may reuse its memory).
  std::optional<TensorCopy> copy_of(const std::string& name) const;
  uint64_t committed_bytes() const;
  uint64_t rounds_finished() const;
  // Tensors a worker engine wrote straight into this receiver's memory (the loader's destination
  // path) rather than handing them to load(), since creation.
  uint64_t tensors_written_in_place() const { return written_in_place_.load(); }

 private:
  friend class ReceiverGroup;
  // finish_weight_update in two steps, so that a group of worker ranks commits all or none:
  // finish_engine() ends the session and finishes the engine (on failure the round's staging is
  // dropped and it throws); then commit_finished() makes the staged round visible (it cannot fail),
  // or drop_finished() drops it. Between the two no session is active: nothing else touches it.
  void finish_engine();
  void commit_finished(const std::optional<std::string>& weight_version);
  void drop_finished();
  // end_weight_update's first half: aborts the engine of an active update, without waiting for
  // the call it interrupts (a group aborts all its ranks before it waits for any).
  void abort_update() noexcept;
  void finish_engine_locked();  // session_mu_ held
  // Returns the names of the tensors the round committed (staged or patched).
  std::vector<std::string> commit_locked(const std::optional<std::string>& weight_version);
  void hand_committed(const std::vector<std::string>& names);  // on_commit; session_mu_ held
  class RoundLoader;  // the Loader a round's receive() calls: copies, destinations, patches
  uint64_t load(std::span<const wt_tensor> tensors);  // returns the bytes copied
  void receive(std::string_view update_info_json);    // the engine's part of an update
  void end_failed_update();                           // ends the session of a failed update
  void discard_staged();                              // staged tensors become spares
  void wait_for_device_copies();
  void drop_pending_patches(const std::string& name);
  // A spare of that size, or new memory aligned for `dtype`, right after the last one handed out.
  TensorMap::node_type take_slot(const std::string& name, uint64_t nbytes, DLDataType dtype);

  Options options_;
  std::unique_ptr<detail::StagingArena> arena_;
  unsigned load_threads_;
  // Two locks, so that readers never wait on a transfer: session_mu_ serialises the control-plane
  // calls (and guards engine_, staged_, spare_) for as long as the engine works; state_mu_ guards
  // what readers see (committed_, version_, rounds_) and is only held briefly.
  std::mutex session_mu_;
  mutable std::mutex state_mu_;
  // engine_ is replaced under session_mu_ and engine_mu_, read under either: end_weight_update
  // takes a reference under engine_mu_ alone to abort a transfer that holds session_mu_.
  std::mutex engine_mu_;
  std::shared_ptr<WorkerEngine> engine_;
  std::atomic<bool> active_{false};
  std::atomic<uint64_t> written_in_place_{0};
  TensorMap staged_, spare_;
  // Patches of the round to tensors it did not rewrite: validated when they arrived, applied to
  // the committed tensors at finish (O(changed elements), not a copy of each tensor), in order.
  struct PendingPatch {
    std::string name;
    DLDataType dtype{};
    int64_t count = 0;                          // elements
    std::size_t indices_at = 0, values_at = 0;  // offsets in pending_bytes_
  };
  std::vector<PendingPatch> pending_patches_;
  // The pending patches' indices and values, appended as they arrive. The memory is kept from
  // round to round, so a round's copy lands in pages already mapped, without zero-filling.
  std::size_t reserve_pending_bytes(std::size_t n);  // returns the offset; the buffer may move
  void clear_pending_patches();                      // at the end of a round
  std::unique_ptr<unsigned char[]> pending_bytes_;
  std::size_t pending_size_ = 0, pending_capacity_ = 0;
  TensorMap committed_;
  std::optional<std::string> version_;
  uint64_t rounds_ = 0;
  bool next_round_prepared_ = false;  // the staging memory of the round after the model's first
  uint64_t committed_bytes_locked() const;  // state_mu_ held
  // Faults in staging memory for `bytes` more, waiting or not; logs what it did.
  void prepare_staging(uint64_t bytes, bool wait, const char* why) noexcept;
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
