// A Gloo mesh of the pairs a backend uses (mesh_pairs.hpp: the broadcast tree, the m2n hubs, or
// every pair), each of which proved which two ranks it joins: what the broadcast group (nccl,
// sparse_nccl), the m2n point-to-point transfers and the trainer group are built on (compiled
// into each plugin).
//
// Rank 0 hosts the rendezvous store (opened before the peers were told where to meet, or here);
// every rank connects as itself with its rank key (session_keys.hpp), a worker fetches the keys
// of its pairs with higher ranks, every rank publishes the address of each of its pairs and reads
// those of its peers, the pairs connect, and each proves its key each way on its socket before
// Gloo reads a byte of it (proving_device.hpp). Once every rank has read what it needs (a barrier
// along the shape's tree), nobody needs the store: it is closed.
#pragma once

#include "communicator.hpp"
#include "tcp_store.hpp"

#include <wt/sdk/errors.hpp>

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include <fmt/format.h>

namespace wt::plugins {

// Blocks until every rank joined and proved its keys, within options.rendezvous_timeout as a
// whole; the context's timeout is then the transfer deadline. Throws sdk::Error (WT_ERR_TIMEOUT
// naming the rendezvous and the ranks expected, WT_ERR_REMOTE for a peer that failed the
// challenge, WT_ERR_SYSTEM when the store cannot listen).
std::shared_ptr<gloo::rendezvous::Context> form_gloo_mesh(const CommunicatorOptions& options,
                                                          std::unique_ptr<TcpStoreServer> store);

// The local address that routes towards `peer` (a name or an address): where this rank's pairs
// listen, and what it advertises to the others. Throws sdk::Error (WT_ERR_SYSTEM) when `peer`
// does not resolve or no local address routes to it.
std::string local_address_towards(const std::string& peer);

// "host:port", an IPv6 address in brackets ("[fe80::1%eth0]:29510"), for messages.
inline std::string endpoint(const std::string& host, int port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

// Gloo reports failures as exceptions of its own; these become wt errors naming `what`.
template <typename F>
void gloo_call(std::string_view what, F&& f) {
  try {
    f();
  } catch (const sdk::Error& e) {
    throw sdk::Error(e.code(), fmt::format("{}: {}", what, e.what()));
  } catch (const gloo::IoException& e) {
    sdk::fail(WT_ERR_TIMEOUT, "{}: a peer did not take part in time or went away ({})", what,
              e.what());
  } catch (const std::exception& e) {
    sdk::fail(WT_ERR_REMOTE, "{}: {}", what, e.what());
  }
}

// Time left until `until`, at least a millisecond (Gloo reads 0 as "no deadline").
inline std::chrono::milliseconds time_left(std::chrono::steady_clock::time_point until) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      until - std::chrono::steady_clock::now()));
}

// Stops the Gloo wait in progress (`current`, guarded by `mu`) and every later one: `mark()` (under
// `mu`) records the abort for the waiting thread to see, then the wait is interrupted again until
// it returned, since an interrupt ends one of Gloo's waits only (a broadcast's root waits once per
// child). Gives up after 5 s.
template <typename Mark>
void interrupt_waits(std::mutex& mu, gloo::transport::UnboundBuffer* const& current, Mark&& mark) {
  using Clock = std::chrono::steady_clock;
  const auto until = Clock::now() + std::chrono::seconds(5);
  for (bool first = true;; first = false) {
    {
      std::lock_guard<std::mutex> l(mu);
      mark();
      if (current == nullptr) return;
      current->abortWaitRecv();
      current->abortWaitSend();
    }
    if (!first && Clock::now() > until) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Little-endian integers in the frames that precede transfers on the mesh.
inline void put_le(unsigned char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>((v >> (8 * i)) & 0xff);
}
inline uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace wt::plugins
