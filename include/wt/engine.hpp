// Engines: RAII owners of a plugin's trainer or worker object.
//
//   auto info = wt::InitInfo::from_json(R"({"backend": "ipc", "rank": 0})");
//   auto engine = wt::trainer_init(info, client, &source);   // loads libwt_ipc.so on first use
//   wt::SendOptions round;
//   round.weight_version = "step-1";
//   engine->send_weights(round);
//
// The host enforces each plugin's capability bits here, before the plugin is called: patches to
// a dense backend, a weight source to a delta backend, a CUDA worker or CUDA tensor to a backend
// without WT_CAP_CUDA_MEMORY, host memory to one without WT_CAP_HOST_MEMORY are refused with
// WT_ERR_INCOMPATIBLE, naming the capability.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/wt_plugin.h>
#include <wt/client.hpp>
#include <wt/init_info.hpp>
#include <wt/trainer_group.hpp>
#include <wt/weight_source.hpp>

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace wt {

class Plugin;

struct SendOptions {
  std::optional<std::string> weight_version;
  // Delta backends only. struct_size and abi_version are filled in by send_weights.
  std::vector<wt_sparse_patch> patches;
  // The cudaStream_t that produced this round's CUDA tensors; null: the legacy default stream.
  void* stream = nullptr;
};

class TrainerEngine {
 public:
  TrainerEngine(std::shared_ptr<const Plugin> plugin, Client& client);
  ~TrainerEngine();
  TrainerEngine(const TrainerEngine&) = delete;
  TrainerEngine& operator=(const TrainerEngine&) = delete;

  void send_weights(const SendOptions& options = {});
  // Safe from another thread: a blocked send_weights returns WT_ERR_ABORTED, and so does a client
  // call the engine is blocked in.
  void abort();
  const Plugin& plugin() const { return *plugin_; }

 private:
  friend std::unique_ptr<TrainerEngine> trainer_init(const InitInfo&, Client&, WeightSource*,
                                                     TrainerGroup*);
  struct CheckedSource;
  std::shared_ptr<const Plugin> plugin_;
  Client& client_;
  std::unique_ptr<CheckedSource> source_;
  wt_trainer* engine_ = nullptr;
  bool failed_round_ = false;  // a round failed: its calls may still be blocked
};

// The factory: dispatches on info.backend(), loading the plugin on first use. `source` is
// required by full-resync backends, refused by delta ones; `group` may be null for one rank.
// client, source and group must outlive the engine.
std::unique_ptr<TrainerEngine> trainer_init(const InitInfo& info, Client& client,
                                            WeightSource* source = nullptr,
                                            TrainerGroup* group = nullptr);

// Where a worker engine puts what it received (the C++ side of wt_loader). Arrays arrive with the
// host's own element size whatever the plugin's was.
class Loader {
 public:
  virtual ~Loader() = default;
  // A batch of tensors, valid only during the call: copy them.
  virtual void load(std::span<const wt_tensor> tensors) = 0;
  // Delta backends: validate every patch of the batch, then apply them all (default: refused).
  virtual void load_patches(std::span<const wt_sparse_patch> patches);
  // Memory the backend may write `param` into directly, valid until receive returns; nullopt:
  // none (the backend then uses load). Default: none.
  virtual std::optional<DLTensor> destination(const ParamMeta& param);
  // The destination handed out for `name` is filled.
  virtual void written(const std::string& name);
};

// A Loader made of one function, for dense backends.
using LoadFn = std::function<void(std::span<const wt_tensor>)>;

struct WorkerOptions {
  DLDevice device{kDLCPU, 0};
  void* stream = nullptr;  // the cudaStream_t the model uses; null: the legacy default stream
  // Receiver-side backend options (a JSON object; empty: none).
  nlohmann::json backend_options = nlohmann::json::object();
  // The model this worker holds, each parameter as it keeps it (empty: not known yet). A backend
  // whose init info fixes what will arrive (m2n's plan) refuses init naming a disagreement.
  std::vector<ParamMeta> held;
};

class WorkerEngine {
 public:
  // init_info_json: what the trainer shipped through init_weight_transfer_engine.
  static std::unique_ptr<WorkerEngine> create(const std::string& backend,
                                              std::string_view init_info_json,
                                              const WorkerOptions& options);
  static std::unique_ptr<WorkerEngine> create(const std::string& backend,
                                              std::string_view init_info_json,
                                              DLDevice device = {kDLCPU, 0});
  WorkerEngine(std::shared_ptr<const Plugin> plugin, wt_worker* engine);
  ~WorkerEngine();
  WorkerEngine(const WorkerEngine&) = delete;
  WorkerEngine& operator=(const WorkerEngine&) = delete;

  void start();
  void receive(std::string_view update_info_json, Loader& loader);
  void receive(std::string_view update_info_json, const LoadFn& load);
  void finish();
  void abort();
  const Plugin& plugin() const { return *plugin_; }

 private:
  std::shared_ptr<const Plugin> plugin_;
  wt_worker* engine_;
};

}  // namespace wt
