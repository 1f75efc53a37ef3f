// A Gloo TCP device whose pairs prove their pair's key on the bare socket before Gloo reads or
// writes a byte of it (compiled into each plugin that forms a Gloo mesh: plugins/common).
//
// Why: each Gloo pair listens on a port of its own while the mesh forms and takes the first
// connection that arrives. Gloo then parses whatever comes in on its loop thread and enforces its
// framing there by throwing, which ends the process. A stranger who races the real peer to that
// port (local ports are easy to list) could therefore kill the receiving process with one
// malformed frame, and Debian's Gloo has neither TLS nor a connection hook.
//
// What: once a pair's socket connects, each side sends a fresh nonce and answers the other's with
// an HMAC under the key of that pair of ranks (session_keys.hpp: only the two ranks and the
// trainer hold it, so a rank cannot act as another) that binds both ranks (a MAC made for one pair
// cannot be replayed on another); Gloo sees the socket only after the peer's answer checked out. A
// connection that does not prove the key by the rendezvous deadline, closes, or answers wrongly
// fails that pair with an sdk::Error (WT_ERR_REMOTE) naming the peer's rank, before any frame was
// parsed. And whatever Gloo throws on its loop thread for a pair afterwards fails that pair (its
// waits get the error) instead of reaching std::terminate.
#pragma once

#include "session_keys.hpp"

#include <gloo/context.h>
#include <gloo/transport/device.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace wt::plugins {

// A device on `address` (the local address the pairs listen on and advertise) for one mesh, as
// the rank `keys` are of (they hold the key of each of its pairs); `until` is the rendezvous
// deadline the proofs must meet.
std::shared_ptr<gloo::transport::Device> make_proving_device(
    const std::string& address, std::shared_ptr<const SessionKeys> keys,
    std::chrono::steady_clock::time_point until);

// When bytes last moved on a proven pair (read or written, steady clock), and whether it closed:
// what the stall deadline measures and what ends a round a peer gave up (stall_watch.hpp).
// Shared, so that a watch may read it after the pair is gone.
class PairProgress {
 public:
  using Clock = std::chrono::steady_clock;
  void touch() noexcept {
    ns_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  }
  void mark_closed() noexcept { closed_.store(true, std::memory_order_relaxed); }
  // Now, while the pair's loop thread is inside a read or write of its non-blocking socket: Gloo
  // keeps copying until the socket runs dry, which on a busy link can outlast a stall deadline
  // (or a process stopped and resumed inside it), and every pass of that loop moves bytes.
  Clock::time_point last() const noexcept {
    if (moving_.load(std::memory_order_relaxed) > 0) return Clock::now();
    return Clock::time_point(Clock::duration(ns_.load(std::memory_order_relaxed)));
  }
  bool closed() const noexcept { return closed_.load(std::memory_order_relaxed); }

  // Held around one read or write on the socket.
  class Moving {
   public:
    explicit Moving(PairProgress& p) noexcept : p_(p) {
      p_.touch();
      p_.moving_.fetch_add(1, std::memory_order_relaxed);
    }
    ~Moving() {
      p_.touch();
      p_.moving_.fetch_sub(1, std::memory_order_relaxed);
    }
    Moving(const Moving&) = delete;
    Moving& operator=(const Moving&) = delete;

   private:
    PairProgress& p_;
  };

 private:
  std::atomic<Clock::rep> ns_{Clock::now().time_since_epoch().count()};
  std::atomic<int> moving_{0};
  std::atomic<bool> closed_{false};
};

// The progress of the pair with `peer` in a mesh formed on a proving device; null for itself, a
// rank outside the mesh, or a pair of another device.
std::shared_ptr<const PairProgress> pair_progress(gloo::Context& mesh, int peer);
// Every pair's, for a wait that any of them may serve (a broadcast tree).
std::vector<std::shared_ptr<const PairProgress>> mesh_progress(gloo::Context& mesh);
// The latest of them (the epoch of the steady clock when there is none).
PairProgress::Clock::time_point latest(const std::vector<std::shared_ptr<const PairProgress>>& all);

}  // namespace wt::plugins
