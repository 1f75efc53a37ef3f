// The round signal: every rank of a group learns that a round is over, and why, within a poll of
// whichever rank gave it up first, when its transport does not tell it. Gloo does (a rank that
// gives a round up closes its pairs, and its peers' waits end at once); NCCL does not: a rank that
// aborts its communicator leaves its peers waiting on it until their own deadline. ProcessGroupNCCL
// propagates such a failure through its store, and so does this: the rank that ends a round
// raises it on the session's store (tcp_store.hpp: RAISE, the first rank wins and is named by the
// store, from its authenticated connection, never by what it says), and every other rank watches
// that round while it runs (FATE, every 100 ms) and aborts its own transfers (ncclCommAbort) the
// moment it hears. Compiled into each plugin that uses it (plugins/common).
//
// Who holds it: m2n's trainer ranks on CUDA memory (M >= 2). Trainer rank 0 hosts the store for
// the trainer ranks only (its world is theirs; its secret travels on the trainer group, never to
// a worker); the workers hear a failed round from rank 0 on the control plane
// (end_weight_update, which aborts their communicators), as nccl's workers do.
//
//   RoundSignal signal(address, port, SessionKeys::of_secret(secret, rank));
//   auto watch = signal.watch(round, [&](const std::string&) { transfers.abort(); });
//   try { ...the round... } catch (...) { signal.raise(round, why); throw; }
#pragma once

#include "session_keys.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace wt::plugins {

class RoundSignal {
 public:
  // The store at address:port, reached as `keys.rank()`.
  RoundSignal(std::string address, int port, SessionKeys keys);

  // How often a watch asks the store, and how long one question may take.
  static constexpr std::chrono::milliseconds kPoll{100};
  static constexpr std::chrono::milliseconds kRequestDeadline{5'000};

  // This rank ends round `round`, because `why`: every watch of it hears within kPoll. Best
  // effort, within 2 s (a store that is gone or full says nothing more). Returns empty, or, when
  // another rank ended the round first, that rank's fate (as fate() says it).
  std::string raise(uint32_t round, const std::string& why) noexcept;

  // Watches round `round` on a thread of its own until destroyed (a watch ends before its
  // signal): the first fate another rank raised for it calls `on_fate` once, from that thread,
  // with what fate() then says. A store that is gone or stops answering ends the watching
  // quietly, and the round is bounded by its transfers' own deadline, as without the signal.
  class Watch {
   public:
    ~Watch();  // stops asking, and joins
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;
    // "trainer rank 2 ended round 7: <why>", or empty while nobody else ended the round.
    std::string fate() const;

   private:
    friend class RoundSignal;
    Watch() = default;
    void run(const RoundSignal& signal, uint32_t round,
             const std::function<void(const std::string&)>& on_fate);
    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::string fate_;
    std::thread thread_;
  };
  std::unique_ptr<Watch> watch(uint32_t round, std::function<void(const std::string&)> on_fate);

  // "trainer rank R ended round N: why", the reason made printable ASCII.
  static std::string describe(int rank, uint32_t round, const std::string& why);

 private:
  std::string address_;
  int port_;
  SessionKeys keys_;
};

}  // namespace wt::plugins
