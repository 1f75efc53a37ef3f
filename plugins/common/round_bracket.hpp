// The sender's round, shared by nccl and sparse_nccl: start on the inference side, the update RPC
// on a side thread (the workers receive inside it), the transfer, finish. While the transfer runs
// the RPC is watched: when it fails (the receiver refused the update, or died and its connection
// closed) the transfer is stopped at once, and the RPC's error, which names the receiver, is what
// the round reports, not what the transfer then says about a peer that left. A failed round ends
// the update on the inference side, so it keeps its weights and accepts the next start (waiting
// a second at most for that: a receiver the round lost does not delay the report).
//
//   RoundBracket round(client_, aborted_, parked_, [this] { abort_group(); });
//   round.run(update_text, [&](RoundBracket::Round& r) {
//     ...; r.before_collective(); group_->broadcast(...); ...
//   }, [&](bool collective_started) { if (collective_started) group_.reset(); }, version);
#pragma once

#include "async_rpc.hpp"

#include <wt/sdk/abortable_wait.hpp>
#include <wt/sdk/errors.hpp>
#include <wt/sdk/host_objects.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace wt::plugins {

// The bracket lives on the round's stack, but the calls it parks outlive it: they reach the
// engine's client (which outlives its parked calls) directly, never through the bracket.
class RoundBracket {
 public:
  // `abort_transfer` stops a collective in progress from another thread (the communicator's
  // abort); it is called only once a collective of this round began.
  RoundBracket(sdk::ClientRef& client, sdk::AbortSignal& aborted,
               std::vector<std::unique_ptr<AsyncRpc>>& parked, std::function<void()> abort_transfer)
      : client_(client), aborted_(aborted), parked_(parked), abort_(std::move(abort_transfer)) {}

  // What the transfer sees of the round.
  class Round {
   public:
    // Called right before each collective: marks the round as begun on the wire, and stops it
    // (throwing the RPC's error) when the RPC already failed.
    void before_collective() {
      watch_->started = true;
      if (watch_->failed.load()) rpc_->wait(aborted_);  // rethrows the RPC's error
    }
    bool started() const { return watch_->started.load(); }

   private:
    friend class RoundBracket;
    struct Watch {
      std::mutex mu;  // held while the watcher may abort; `armed` is cleared under it
      bool armed = true;
      std::atomic<bool> started{false}, failed{false};
    };
    Round(std::shared_ptr<Watch> w, AsyncRpc* rpc, sdk::AbortSignal& aborted)
        : watch_(std::move(w)), rpc_(rpc), aborted_(aborted) {}
    std::shared_ptr<Watch> watch_;
    AsyncRpc* rpc_;
    sdk::AbortSignal& aborted_;
  };

  // One round: `transfer(Round&)` does the collectives, `on_failure(collective_started)` drops
  // what a failed round broke (the group, once a collective began). Throws the round's error.
  // `verification`, when given, returns the round's digests to deliver once the transfer and its
  // update call succeeded (empty: none); a receiver that refuses them fails the round.
  template <typename Transfer, typename OnFailure>
  void run(const std::string& update_text, Transfer&& transfer, OnFailure&& on_failure,
           const char* weight_version, const std::function<std::string()>& verification = nullptr,
           const std::function<std::string()>& given_up = nullptr) {
    start(given_up);
    auto watch = std::make_shared<Round::Watch>();
    // Dekker-style with before_collective(): the watcher sets `failed` then looks at `started`,
    // the transfer sets `started` then looks at `failed`, so one of them always sees the other.
    auto on_error = [watch, abort = abort_] {
      watch->failed = true;
      std::lock_guard<std::mutex> l(watch->mu);
      if (watch->armed && watch->started.load()) abort();
    };
    auto rpc = std::make_unique<AsyncRpc>(
        [client = &client_, text = update_text] { client->update_weights(text); }, &aborted_,
        on_error);
    Round round(watch, rpc.get(), aborted_);
    try {
      // A refusal that already arrived fails the round before any collective (reference §5.4).
      if (rpc->done()) rpc->wait(aborted_);
      transfer(round);
      rpc->wait(aborted_);
      if (verification)
        if (const std::string digests = verification(); !digests.empty())
          client_.update_weights(digests);
    } catch (...) {
      std::exception_ptr error = std::current_exception();
      // A transfer that broke because its receiver refused or died: the RPC says which, and
      // says it within moments (a closed connection, an HTTP error).
      if (!aborted_.aborted() && rpc->finished_within(std::chrono::milliseconds(500)) &&
          rpc->error())
        error = rpc->error();
      {
        std::lock_guard<std::mutex> l(watch->mu);
        watch->armed = false;  // a late failure of a parked call aborts nothing
      }
      parked_.push_back(std::move(rpc));  // never joined here: it may be blocked for good
      // The group first (retire_broken: Gloo's closing pairs end the workers' waits at once; an
      // NCCL group is aborted and kept until the engine goes, after the workers were told).
      on_failure(round.started());
      // The inference side is told the round is over. One that is there answers at once; one the
      // round lost (a cut link, a stopped host) must not hold the report back for the control
      // plane's deadline: the call goes on beside it, parked, and is interrupted when the engine
      // goes.
      auto end = std::make_unique<AsyncRpc>([client = &client_, reason = sdk::message_of(error)] {
        client->end_weight_update(reason);
      });
      end->finished_within(std::chrono::seconds(1));
      parked_.push_back(std::move(end));
      std::rethrow_exception(error);
    }
    {
      std::lock_guard<std::mutex> l(watch->mu);
      watch->armed = false;
    }
    client_.finish_weight_update(weight_version);
  }

 private:
  // start_weight_update. With `given_up` (why another rank of the round already ended it, or
  // empty), the call runs beside a watch: a rank that gave the round up while the receiver has
  // not answered (a stopped host) ends it here at once, not at the control plane's deadline. The
  // call goes on parked; the inference side hears end_weight_update.
  void start(const std::function<std::string()>& given_up) {
    if (!given_up) {
      client_.start_weight_update();
      return;
    }
    auto rpc = std::make_unique<AsyncRpc>([client = &client_] { client->start_weight_update(); },
                                          &aborted_);
    std::string why;
    while (!rpc->finished_within(std::chrono::milliseconds(10)))
      if (aborted_.aborted() || !(why = given_up()).empty()) break;
    if (rpc->done()) {
      rpc->wait(aborted_);  // rethrows its error
      return;
    }
    // The end goes after the start (its own deadline bounds it), never before it.
    std::shared_ptr<AsyncRpc> started(std::move(rpc));
    parked_.push_back(std::make_unique<AsyncRpc>([client = &client_, started, why] {
      started->finished_within(std::chrono::hours(24));
      client->end_weight_update("start_weight_update: " + (why.empty() ? "aborted" : why));
    }));
    if (why.empty()) aborted_.check("start_weight_update");
    throw sdk::Error(WT_ERR_REMOTE, "start_weight_update: " + why);
  }

  sdk::ClientRef& client_;
  sdk::AbortSignal& aborted_;
  std::vector<std::unique_ptr<AsyncRpc>>& parked_;
  std::function<void()> abort_;
};

}  // namespace wt::plugins
