// Engines: RAII owners of a plugin's trainer or worker object.
//
//   auto info = wt::InitInfo::from_json(R"({"backend": "ipc", "rank": 0})");
//   auto engine = wt::trainer_init(info, client, &source);   // loads libwt_ipc.so on first use
//   wt::SendOptions round;
//   round.weight_version = "step-1";
//   engine->send_weights(round);
#pragma once

#include <wt/wt_plugin.h>
#include <wt/client.hpp>
#include <wt/init_info.hpp>
#include <wt/trainer_group.hpp>
#include <wt/weight_source.hpp>

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
  std::vector<wt_sparse_patch> patches;  // delta backends only
};

class TrainerEngine {
 public:
  TrainerEngine(std::shared_ptr<const Plugin> plugin, wt_trainer* engine);
  ~TrainerEngine();
  TrainerEngine(const TrainerEngine&) = delete;
  TrainerEngine& operator=(const TrainerEngine&) = delete;

  void send_weights(const SendOptions& options = {});
  // Safe from another thread: a blocked send_weights returns WT_ERR_ABORTED.
  void abort();
  const Plugin& plugin() const { return *plugin_; }

 private:
  std::shared_ptr<const Plugin> plugin_;
  wt_trainer* engine_;
};

// The factory: dispatches on info.backend(), loading the plugin on first use. `source` is
// required by full-resync backends, refused by delta ones; `group` may be null for one rank.
// client, source and group must outlive the engine.
std::unique_ptr<TrainerEngine> trainer_init(const InitInfo& info, Client& client,
                                            WeightSource* source = nullptr,
                                            TrainerGroup* group = nullptr);

// Receives one batch of tensors; they are valid only during the call.
using Loader = std::function<void(std::span<const wt_tensor>)>;

class WorkerEngine {
 public:
  // init_info_json: what the trainer shipped through init_weight_transfer_engine.
  static std::unique_ptr<WorkerEngine> create(const std::string& backend,
                                              std::string_view init_info_json,
                                              DLDevice device = {kDLCPU, 0});
  WorkerEngine(std::shared_ptr<const Plugin> plugin, wt_worker* engine);
  ~WorkerEngine();
  WorkerEngine(const WorkerEngine&) = delete;
  WorkerEngine& operator=(const WorkerEngine&) = delete;

  void start();
  void receive(std::string_view update_info_json, const Loader& load);
  void finish();
  void abort();
  const Plugin& plugin() const { return *plugin_; }

 private:
  std::shared_ptr<const Plugin> plugin_;
  wt_worker* engine_;
};

}  // namespace wt
