#include <wt/error.hpp>
#include <wt/services/engine_session.hpp>

#include <utility>

namespace wt {

EngineSession::EngineSession(std::string backend, EngineMemory& memory, WorkerOptions options)
    : backend_(std::move(backend)), memory_(memory), options_(std::move(options)) {}

EngineSession::~EngineSession() {
  std::lock_guard<std::mutex> l(mu_);
  end_round_locked();
  std::lock_guard<std::mutex> e(engine_mu_);
  engine_.reset();
}

std::shared_ptr<WorkerEngine> EngineSession::engine() const {
  std::lock_guard<std::mutex> e(engine_mu_);
  return engine_;
}

void EngineSession::end_round_locked() noexcept {
  if (!active_) return;
  active_ = false;
  if (auto e = engine()) {
    try {
      e->abort();
    } catch (...) {  // ending the round: nothing more to do with its engine's error
    }
  }
  try {
    memory_.discard();
  } catch (...) {
  }
}

void EngineSession::init_weight_transfer_engine(nlohmann::json init_info) {
  std::lock_guard<std::mutex> l(mu_);
  if (!init_info.is_object())
    throw Error(WT_ERR_INVALID_ARGUMENT, "init_info must be a JSON object");
  end_round_locked();  // a new trainer: the old round is over, and never committed
  {
    std::lock_guard<std::mutex> e(engine_mu_);
    engine_.reset();  // the old engine goes before the new one is made (ports, files, devices)
  }
  std::shared_ptr<WorkerEngine> created =
      WorkerEngine::create(backend_, init_info.dump(), options_);
  std::lock_guard<std::mutex> e(engine_mu_);
  engine_ = std::move(created);
}

void EngineSession::start_weight_update() {
  std::lock_guard<std::mutex> l(mu_);
  auto e = engine();
  if (!e)
    throw Error(WT_ERR_STATE,
                "weight transfer is not initialised: call init_weight_transfer_engine first");
  if (active_)
    throw Error(WT_ERR_STATE,
                "a weight update is already active. Call finish_weight_update first.");
  e->start();
  active_ = true;
}

void EngineSession::update_weights(nlohmann::json update_info) {
  std::lock_guard<std::mutex> l(mu_);
  if (!active_)
    throw Error(WT_ERR_STATE, "start_weight_update must be called before update_weights.");
  try {
    if (update_info.is_array()) {  // one payload per worker rank: this session is one rank
      if (update_info.size() != 1)
        throw Error(WT_ERR_INVALID_ARGUMENT,
                    "update_info is a list of " + std::to_string(update_info.size()) +
                        " per-worker payloads, but this engine has 1 worker");
      update_info = std::move(update_info[0]);
    }
    engine()->receive(update_info.dump(), memory_);
  } catch (...) {
    end_round_locked();  // vLLM's rule: a failed update ends the session
    throw;
  }
}

void EngineSession::finish_weight_update(const std::optional<std::string>& weight_version) {
  std::lock_guard<std::mutex> l(mu_);
  if (!active_)
    throw Error(WT_ERR_STATE, "start_weight_update must be called before finish_weight_update.");
  try {
    engine()->finish();
  } catch (...) {
    end_round_locked();
    throw;
  }
  active_ = false;
  std::lock_guard<std::mutex> s(state_mu_);
  memory_.commit();
  if (weight_version) version_ = weight_version;
}

void EngineSession::end_weight_update(const std::string&) {
  // Abort a blocked update first, without its lock; then end the session once it returned.
  if (auto e = engine(); e && active_) e->abort();
  std::lock_guard<std::mutex> l(mu_);
  end_round_locked();
}

void EngineSession::set_weight_version(const std::string& version) {
  std::lock_guard<std::mutex> s(state_mu_);
  version_ = version;
}

std::optional<std::string> EngineSession::weight_version() const {
  std::lock_guard<std::mutex> s(state_mu_);
  return version_;
}

std::vector<std::map<std::string, std::string>> EngineSession::checksums_by_rank() const {
  std::lock_guard<std::mutex> s(state_mu_);
  return {memory_.checksums()};
}

}  // namespace wt
