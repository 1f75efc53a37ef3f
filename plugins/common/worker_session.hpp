// A worker engine's update session, as the nccl and sparse_nccl workers keep it: start, receive
// (only inside a session), finish, and abort from any thread, which interrupts the broadcast a
// receive in progress waits in (the domain is then broken) and leaves the domain alone between
// updates. Where the sender digests its broadcasts, the session also verifies each round against
// the digests delivered after the data, and refuses to finish one that was not verified.
#pragma once

#include "communicator.hpp"
#include "round_digests.hpp"

#include <wt/sdk/errors.hpp>

#include <mutex>

namespace wt::plugins {

class WorkerSession {
 public:
  // `backend` names the engine in the "initialise again" error.
  explicit WorkerSession(const char* backend) : backend_(backend) {}

  // The init info asked for round digests (WorkerInit::round_digests).
  void expect_digests(bool expected) { verifier_ = RoundVerifier(expected); }

  void start(Communicator* domain) {
    std::lock_guard<std::mutex> l(mu_);
    if (active_) sdk::fail(WT_ERR_STATE, "a weight update is already active; call finish first");
    if (domain == nullptr || domain->broken())
      sdk::fail(WT_ERR_STATE,
                "the {} group broke in an earlier update; initialise the engine again", backend_);
    verifier_.begin(*domain);
    active_ = true;
  }

  // Inside a receive: when `update_info` is the round's digests (not tensors), checks what the
  // domain received against them and returns true; throws naming the first difference.
  bool verified(Communicator& domain, const nlohmann::json& update_info) {
    if (!RoundVerifier::is_verification(update_info)) return false;
    verifier_.verify(domain, update_info);
    return true;
  }

  // Marks a receive in progress for its scope.
  class Receiving {
   public:
    explicit Receiving(WorkerSession& s) : s_(s) {
      std::lock_guard<std::mutex> l(s_.mu_);
      if (!s_.active_) sdk::fail(WT_ERR_STATE, "start must be called before receive");
      s_.receiving_ = true;
    }
    ~Receiving() {
      std::lock_guard<std::mutex> l(s_.mu_);
      s_.receiving_ = false;
    }
    Receiving(const Receiving&) = delete;
    Receiving& operator=(const Receiving&) = delete;

   private:
    WorkerSession& s_;
  };

  void finish() {
    std::lock_guard<std::mutex> l(mu_);
    if (!active_) sdk::fail(WT_ERR_STATE, "finish called with no active weight update");
    active_ = false;
    verifier_.check_finish();
  }

  void abort(Communicator* domain) {
    std::lock_guard<std::mutex> l(mu_);
    active_ = false;
    if (receiving_ && domain != nullptr) domain->abort();
  }

 private:
  const char* backend_;
  std::mutex mu_;
  bool active_ = false;
  bool receiving_ = false;
  RoundVerifier verifier_;
};

}  // namespace wt::plugins
