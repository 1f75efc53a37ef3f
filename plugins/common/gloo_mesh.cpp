#include "gloo_mesh.hpp"

#include "fd_budget.hpp"
#include "proving_device.hpp"
#include "session_keys.hpp"
#include "sigpipe_guard.hpp"

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

// A rendezvous context that connects the pairs it is given and no others (Gloo's own
// connectFullMesh connects every pair, and has every rank read every rank's host name and
// every rank's list of addresses: O(W^2) through the store). Each rank publishes the address of
// its pair with each peer under a key of its own, and reads only the addresses meant for it.
class ChosenPairsContext final : public gloo::rendezvous::Context {
 public:
  using gloo::rendezvous::Context::Context;

  void connect_pairs(TcpStoreClient& store, const std::shared_ptr<gloo::transport::Device>& device,
                     const std::vector<int>& peers) {
    auto pairs = device->createContext(rank, size);
    pairs->setTimeout(getTimeout());
    for (int peer : peers) {
      auto& pair = pairs->createPair(peer);
      pair->setLocalRank(0);  // read by no transport wt uses; set, so it is never uninitialised
      store.set(pair_address_key(rank, peer), pair->address().bytes());
    }
    // Every address first, then the connections: a rank waiting in a connect for a peer that is
    // late no longer needs the store (which drops a connection idle for its idle deadline).
    std::vector<std::vector<char>> addresses;
    addresses.reserve(peers.size());
    for (int peer : peers) addresses.push_back(store.get(pair_address_key(peer, rank)));
    for (std::size_t i = 0; i < peers.size(); ++i) pairs->getPair(peers[i])->connect(addresses[i]);
    device_ = device;
    transportContext_ = std::move(pairs);
  }
};

// Every rank has read every key it needs once it reached this barrier: then nobody needs the
// store. It runs along the tree MeshPairs::parent() names (each of its edges is a pair): every
// rank hears from its children, tells its parent, waits for the parent's release and passes it
// on.
void wait_for_every_rank(gloo::Context& mesh, const MeshPairs& shape, const std::vector<int>& peers,
                         Clock::time_point until) {
  std::vector<int> children;
  for (int p : peers)
    if (shape.parent(p) == mesh.rank) children.push_back(p);
  const int parent = shape.parent(mesh.rank);
  const auto gathered_slot = static_cast<uint64_t>(mesh.nextSlot());
  const auto release_slot = static_cast<uint64_t>(mesh.nextSlot());
  std::vector<char> from_children(std::max<std::size_t>(children.size(), 1));
  char token = 1;
  auto in = mesh.createUnboundBuffer(from_children.data(), from_children.size());
  auto out = mesh.createUnboundBuffer(&token, 1);
  auto wait_recv = [&] {
    if (!in->waitRecv(time_left(until)))
      fail(WT_ERR_ABORTED, "the mesh's formation barrier was interrupted");
  };
  auto wait_send = [&] {
    if (!out->waitSend(time_left(until)))
      fail(WT_ERR_ABORTED, "the mesh's formation barrier was interrupted");
  };
  for (std::size_t i = 0; i < children.size(); ++i) in->recv(children[i], gathered_slot, i, 1);
  for (std::size_t i = 0; i < children.size(); ++i) wait_recv();
  if (parent >= 0) {
    out->send(parent, gathered_slot);
    wait_send();
    in->recv(parent, release_slot, 0, 1);
    wait_recv();
  }
  for (int child : children) out->send(child, release_slot);
  for (std::size_t i = 0; i < children.size(); ++i) wait_send();
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
  const std::vector<int> peers = o.pairs.peers(o.rank, o.world_size);
  // Before any socket: a mesh short of descriptors fails half-formed, and its peers wait.
  ensure_descriptors(
      mesh_descriptors(peers.size(), o.rank == 0 ? static_cast<std::size_t>(o.world_size - 1) : 0),
      fmt::format("a Gloo mesh of {} ranks (this is rank {})", o.world_size, o.rank));
  const auto until = Clock::now() + o.rendezvous_timeout;
  if (o.rank == 0 && store == nullptr)
    store = std::make_unique<TcpStoreServer>(
        o.master_address, o.master_port, keys->secret(),
        TcpStoreServer::Limits::for_mesh(o.world_size, o.pairs), o.warn);
  const std::string what =
      fmt::format("rendezvous of {} ranks at {} (this is rank {})", o.world_size,
                  endpoint(o.master_address, o.master_port), o.rank);
  std::shared_ptr<gloo::rendezvous::Context> context;
  SigpipeBlocked no_sigpipe;  // also for Gloo's loop thread, started in here
  try {
    gloo_call(what, [&] {
      auto client = std::make_shared<TcpStoreClient>(o.master_address, o.master_port, *keys, until,
                                                     o.give_up);
      // A worker derives the keys of its pairs with lower ranks; the others the store hands it
      // (a worker of a hub mesh pairs only with the lower, trainer ranks: it needs none).
      if (const auto higher = o.pairs.higher_peers(o.rank, o.world_size);
          !keys->holds_secret() && !higher.empty())
        client->learn_pair_keys(*keys, higher);
      // Every pair proves its key on its socket before Gloo reads a byte of it.
      auto device = make_proving_device(local_address_towards(o.master_address), keys, until);
      auto chosen = std::make_shared<ChosenPairsContext>(o.rank, o.world_size);
      context = chosen;
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
      std::thread([f, client, device, chosen, peers, shape = o.pairs, until]() mutable {
        SigpipeBlocked blocked;
        std::exception_ptr error;
        try {
          chosen->connect_pairs(*client, device, peers);
          wait_for_every_rank(*chosen, shape, peers, until);
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
