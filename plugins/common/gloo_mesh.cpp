#include "gloo_mesh.hpp"

#include "fd_budget.hpp"
#include "proving_device.hpp"
#include "session_keys.hpp"
#include "sigpipe_guard.hpp"

#include <gloo/barrier.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <exception>
#include <vector>

namespace wt::plugins {
namespace {

using sdk::fail;
using Clock = std::chrono::steady_clock;

}  // namespace

std::string local_address_towards(const std::string& peer) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(peer.c_str(), "9", &hints, &res) != 0 || res == nullptr)
    fail(WT_ERR_SYSTEM, "cannot resolve master_address '{}'", peer);
  std::string out;
  int fd = ::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  // `peer` is one of this host's own addresses (rank 0 at its own rendezvous, ranks sharing a
  // host): that address itself, which the route would have replaced by the interface's first one
  // (127.0.0.2 by 127.0.0.1, say). Otherwise the address the route to it leaves from.
  sockaddr_storage any_port{};
  std::memcpy(&any_port, res->ai_addr, std::min<std::size_t>(res->ai_addrlen, sizeof any_port));
  if (any_port.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6*>(&any_port)->sin6_port = 0;
  else
    reinterpret_cast<sockaddr_in*>(&any_port)->sin_port = 0;
  const bool own =
      fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&any_port), res->ai_addrlen) == 0;
  if (fd >= 0 && (own || ::connect(fd, res->ai_addr, res->ai_addrlen) == 0)) {  // no packet sent
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    // getnameinfo keeps a link-local IPv6 address's scope ("fe80::1%eth0"): without it, the
    // address could not be dialled.
    char host[NI_MAXHOST] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, nullptr, 0,
                      NI_NUMERICHOST) == 0)
      out = host;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  if (out.empty()) fail(WT_ERR_SYSTEM, "no local address routes to master_address '{}'", peer);
  return out;
}

namespace {

// Every rank has read every key once it reached this barrier: then nobody needs the store.
void wait_for_every_rank(const std::shared_ptr<gloo::Context>& context, Clock::time_point until) {
  gloo::BarrierOptions barrier(context);
  barrier.setTimeout(time_left(until));
  gloo::barrier(barrier);
}

}  // namespace

std::shared_ptr<gloo::rendezvous::Context> form_gloo_mesh(const CommunicatorOptions& o,
                                                          std::unique_ptr<TcpStoreServer> store) {
  if (o.world_size < 2 || o.rank < 0 || o.rank >= o.world_size)
    fail(WT_ERR_INVALID_ARGUMENT, "rank {} is not in a world of size {}", o.rank, o.world_size);
  if (o.session_secret.empty() == o.rank_key.empty())
    fail(WT_ERR_INVALID_ARGUMENT,
         "a Gloo group needs this rank's key (field 'rank_keys' of the worker init info) or, on a "
         "trainer rank, the session secret, and not both");
  auto keys = std::make_shared<SessionKeys>(
      o.rank_key.empty()
          ? SessionKeys::of_secret(SessionSecret::from_hex(o.session_secret, "session_secret"),
                                   o.rank)
          : SessionKeys::of_rank_key(SessionSecret::from_hex(o.rank_key, "rank_keys"), o.rank));
  if (o.rank == 0 && !keys->holds_secret())
    fail(WT_ERR_INVALID_ARGUMENT, "rank 0 hosts the rendezvous: it needs the session secret");
  // Before any socket: a mesh short of descriptors fails half-formed, and its peers wait.
  ensure_descriptors(
      mesh_descriptors(o.world_size, o.rank),
      fmt::format("a Gloo mesh of {} ranks (this is rank {})", o.world_size, o.rank));
  const auto until = Clock::now() + o.rendezvous_timeout;
  if (o.rank == 0 && store == nullptr)
    store =
        std::make_unique<TcpStoreServer>(o.master_address, o.master_port, keys->secret(),
                                         TcpStoreServer::Limits::for_world(o.world_size), o.warn);
  const std::string what =
      fmt::format("rendezvous of {} ranks at {} (this is rank {})", o.world_size,
                  endpoint(o.master_address, o.master_port), o.rank);
  std::shared_ptr<gloo::rendezvous::Context> context;
  SigpipeBlocked no_sigpipe;  // also for Gloo's loop thread, started in here
  try {
    gloo_call(what, [&] {
      auto client = std::make_shared<TcpStoreClient>(o.master_address, o.master_port, *keys, until,
                                                     o.give_up);
      // A worker derives the keys of its pairs with lower ranks; the others the store hands it.
      if (!keys->holds_secret()) client->learn_pair_keys(*keys, o.world_size);
      // Every pair proves its key on its socket before Gloo reads a byte of it.
      auto device = make_proving_device(local_address_towards(o.master_address), keys, until);
      context = std::make_shared<gloo::rendezvous::Context>(o.rank, o.world_size);
      context->setTimeout(time_left(until));
      // Gloo's pair connect waits without end for a peer that published its address and then
      // died: the mesh forms on a thread of its own, watched here against the deadline. A
      // formation that never ends leaves that thread (holding what it uses) behind, blocked.
      struct Formation {
        std::mutex mu;
        std::condition_variable cv;
        bool done = false;
        std::exception_ptr error;
      };
      auto f = std::make_shared<Formation>();
      std::thread([f, client, device, context, until]() mutable {
        SigpipeBlocked blocked;
        std::exception_ptr error;
        try {
          context->connectFullMesh(*client, device);
          wait_for_every_rank(context, until);
        } catch (...) {
          error = std::current_exception();
        }
        std::lock_guard<std::mutex> l(f->mu);
        f->done = true;
        f->error = error;
        f->cv.notify_all();
      }).detach();
      std::unique_lock<std::mutex> l(f->mu);
      const auto grace = until + std::chrono::seconds(1);  // the thread's own errors come first
      while (!f->done) {
        if (Clock::now() >= grace)
          fail(WT_ERR_TIMEOUT,
               "the mesh did not form within {} ms: a rank published its address and went away "
               "(or never connected its pairs)",
               o.rendezvous_timeout.count());
        if (o.give_up && o.give_up()) fail(WT_ERR_ABORTED, "the rendezvous was given up");
        f->cv.wait_for(l, std::chrono::milliseconds(20));
      }
      if (f->error) std::rethrow_exception(f->error);
    });
  } catch (const sdk::Error& e) {
    if (store != nullptr && !store->failure().empty())
      throw sdk::Error(e.code(), fmt::format("{} ({})", e.what(), store->failure()));
    throw;
  }
  store.reset();
  context->setTimeout(o.transfer_timeout);
  return context;
}

}  // namespace wt::plugins
