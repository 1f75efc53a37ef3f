// vLLM's routes and session rules over an engine's own memory: serve an EngineSession with
// wt::HttpServer and the backend's worker engine writes each round where the engine says, with
// no copy of the model held by wt (the reference receiver, by contrast, keeps its own).
//
//   struct Model : wt::EngineMemory { ...destination(), written(), commit(), checksums()... };
//   Model model;
//   wt::EngineSession session("nccl", model);
//   wt::HttpServer server(session, {.host = "0.0.0.0", .port = 8000});
//   server.start();
//
// The rules it keeps, as `wt serve` does: one round at a time (start while one is active: 409;
// update or finish without one: 409); a failed update or finish ends the round, the worker
// engine aborted and the memory told to discard; end_weight_update aborts a blocked update at
// once; a new init ends an active round, then replaces the worker engine. examples/engine is an
// engine built on it; docs/engines.md walks through it.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/engine.hpp>
#include <wt/services/weight_routes.hpp>

#include <atomic>
#include <memory>
#include <mutex>

namespace wt {

// The engine's side: the Loader the worker engine writes a round through (destination(),
// written(), load(); load_patches() for delta backends), and what ending a round does. Its
// destinations must not be what inference reads until commit() (a second buffer swapped in, or
// staging copied over), if a round that does not finish is to leave the model as it was.
class EngineMemory : public Loader {
 public:
  // The round finished on the worker engine: make what it wrote the engine's weights.
  virtual void commit() = 0;
  // The round ended without finishing (refused, aborted, a new init): forget what it wrote.
  virtual void discard() = 0;
  // name -> wt::checksum_tensor of the committed weights. Never called during commit(), but it
  // may be while a round writes (from a server thread): guard what destination() changes.
  virtual std::map<std::string, std::string> checksums() const = 0;
};

class EngineSession final : public WeightRoutes {
 public:
  // `memory` must outlive the session. options: the worker engine's (device, stream, backend
  // options, the model held).
  EngineSession(std::string backend, EngineMemory& memory, WorkerOptions options = {});
  ~EngineSession() override;

  void init_weight_transfer_engine(nlohmann::json init_info) override;
  void start_weight_update() override;
  void update_weights(nlohmann::json update_info) override;
  void finish_weight_update(const std::optional<std::string>& weight_version) override;
  void end_weight_update(const std::string& reason) override;
  void set_weight_version(const std::string& version) override;

  const std::string& backend() const override { return backend_; }
  bool session_active() const override { return active_; }
  std::optional<std::string> weight_version() const override;
  int world_size() const override { return 1; }
  std::vector<std::map<std::string, std::string>> checksums_by_rank() const override;

 private:
  void end_round_locked() noexcept;  // mu_ held
  std::shared_ptr<WorkerEngine> engine() const;

  const std::string backend_;
  EngineMemory& memory_;
  const WorkerOptions options_;
  std::mutex mu_;                 // the session calls, one at a time
  mutable std::mutex engine_mu_;  // end_weight_update reaches the engine without mu_
  std::shared_ptr<WorkerEngine> engine_;
  std::atomic<bool> active_{false};
  mutable std::mutex state_mu_;  // the version, and commit() against checksums()
  std::optional<std::string> version_;
};

}  // namespace wt
