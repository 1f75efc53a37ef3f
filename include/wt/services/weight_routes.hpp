// What vLLM's weight-transfer routes call, behind wt::HttpServer: the reference receiver
// (ReceiverGroup) is one implementation, an engine's own memory (EngineSession) another. The
// server maps each wt::Error to the route's status (WT_ERR_STATE: 409, WT_ERR_INVALID_ARGUMENT:
// 400, ...) and its message to the answer's "detail".
//
// The server calls from its connection threads. An implementation serialises the session calls
// (init, start, update, finish, set_weight_version) itself; end_weight_update must reach a
// blocked update (abort it) without waiting for it; the readers (weight_version, world_size,
// checksums_by_rank, backend, session_active) must answer while a round runs.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace wt {

class WeightRoutes {
 public:
  virtual ~WeightRoutes() = default;

  // POST /init_weight_transfer_engine: a new worker engine from the trainer's init info; an
  // active round is ended first.
  virtual void init_weight_transfer_engine(nlohmann::json init_info) = 0;
  virtual void start_weight_update() = 0;                       // POST /start_weight_update
  virtual void update_weights(nlohmann::json update_info) = 0;  // POST /update_weights
  // POST /finish_weight_update: the round is committed, and tagged with the version when given.
  virtual void finish_weight_update(const std::optional<std::string>& weight_version) = 0;
  // POST /end_weight_update (wt's own): the round is over uncommitted; not an error without one.
  virtual void end_weight_update(const std::string& reason) = 0;
  // POST /update_weight_version (refused by the server while a round is active).
  virtual void set_weight_version(const std::string& version) = 0;

  virtual const std::string& backend() const = 0;                 // GET /health
  virtual bool session_active() const = 0;                        // GET /health
  virtual std::optional<std::string> weight_version() const = 0;  // GET /weight_info
  virtual int world_size() const = 0;                             // GET /get_world_size
  // GET /weight_checksums: per worker rank, name -> XXH3-64 hex of its committed weights
  // (wt::checksum_tensor).
  virtual std::vector<std::map<std::string, std::string>> checksums_by_rank() const = 0;
};

}  // namespace wt
