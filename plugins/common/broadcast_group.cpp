#include "broadcast_group.hpp"

#include "session_secret.hpp"
#include "sigpipe_guard.hpp"

#include <wt/sdk/errors.hpp>

#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/transport/tcp/device.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace wt::plugins {
namespace {

using sdk::fail;

// The local address that routes towards `peer`: what this rank advertises to the others.
std::string local_address_towards(const std::string& peer) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(peer.c_str(), "9", &hints, &res) != 0 || res == nullptr)
    fail(WT_ERR_SYSTEM, "cannot resolve master_address '{}'", peer);
  std::string out;
  int fd = ::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {  // no packet is sent
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    char buf[INET6_ADDRSTRLEN] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      const void* a =
          ss.ss_family == AF_INET6
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
      if (::inet_ntop(ss.ss_family, a, buf, sizeof buf) != nullptr) out = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  if (out.empty()) fail(WT_ERR_SYSTEM, "no local address routes to master_address '{}'", peer);
  return out;
}

// Gloo reports failures as exceptions of its own; these become wt errors naming the phase.
template <typename F>
void gloo_call(const std::string& what, F&& f) {
  try {
    f();
  } catch (const sdk::Error& e) {
    throw sdk::Error(e.code(), fmt::format("{}: {}", what, e.what()));
  } catch (const gloo::IoException& e) {
    fail(WT_ERR_TIMEOUT, "{}: a peer did not take part in time or went away ({})", what, e.what());
  } catch (const std::exception& e) {
    fail(WT_ERR_REMOTE, "{}: {}", what, e.what());
  }
}

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds left(Clock::time_point until) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()));
}

void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>((v >> (8 * i)) & 0xff);
}
uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
constexpr unsigned char kFrameMagic[4] = {'W', 'T', 'B', '1'};

// What rank `from` answers to rank `to`'s challenge `nonce`.
Mac pair_answer(const SessionSecret& secret, const unsigned char* nonce, int from, int to) {
  std::string m(reinterpret_cast<const char*>(nonce), sizeof(Nonce));
  unsigned char ranks[8];
  put_u32(ranks, static_cast<uint32_t>(from));
  put_u32(ranks + 4, static_cast<uint32_t>(to));
  m.append(reinterpret_cast<const char*>(ranks), sizeof ranks);
  return secret.mac("wt gloo pair", m);
}

}  // namespace

BroadcastGroup::BroadcastGroup(const Options& o, std::unique_ptr<TcpStoreServer> store)
    : options_(o) {
  if (o.world_size < 2 || o.rank < 0 || o.rank >= o.world_size)
    fail(WT_ERR_INVALID_ARGUMENT, "rank {} is not in a world of size {}", o.rank, o.world_size);
  if (o.session_secret.empty())
    fail(WT_ERR_INVALID_ARGUMENT,
         "a Gloo group needs the session secret the sender minted (field 'session_secret' of the "
         "worker init info)");
  const SessionSecret secret = SessionSecret::from_hex(o.session_secret, "session_secret");
  const auto until = Clock::now() + o.rendezvous_timeout;
  if (o.rank == 0 && store == nullptr)
    store =
        std::make_unique<TcpStoreServer>(o.master_address, o.master_port, secret,
                                         TcpStoreServer::Limits::for_world(o.world_size), o.warn);
  const std::string what = fmt::format("rendezvous of {} ranks at {}:{} (this is rank {})",
                                       o.world_size, o.master_address, o.master_port, o.rank);
  SigpipeBlocked no_sigpipe;  // also for Gloo's loop thread, started in here
  try {
    gloo_call(what, [&] {
      TcpStoreClient client(o.master_address, o.master_port, secret, until);
      gloo::transport::tcp::attr attr(local_address_towards(o.master_address).c_str());
      auto device = gloo::transport::tcp::CreateDevice(attr);
      context_ = std::make_shared<gloo::rendezvous::Context>(o.rank, o.world_size);
      context_->setTimeout(left(until));
      context_->connectFullMesh(client, device);
      authenticate_pairs(secret, until);
    });
  } catch (const sdk::Error& e) {
    if (store != nullptr && !store->failure().empty())
      throw sdk::Error(e.code(), fmt::format("{} ({})", e.what(), store->failure()));
    throw;
  }
  // Every rank answered rank 0's challenge after it read every key: nobody needs the store now.
  store.reset();
  context_->setTimeout(o.transfer_timeout);
}

BroadcastGroup::~BroadcastGroup() = default;

// Each rank sends every peer a fresh nonce and answers each peer's nonce with a MAC under the
// secret binding both ranks; a peer whose answer is not the expected one fails the rendezvous.
// Whoever took a pair's connection without the secret (a stranger racing the real peer to the
// pair's port) is found here, before any weight byte moves on the mesh.
void BroadcastGroup::authenticate_pairs(const SessionSecret& secret, Clock::time_point until) {
  const int n = options_.world_size, me = options_.rank;
  const std::size_t nb = sizeof(Nonce), mb = sizeof(Mac);
  std::vector<unsigned char> mine(n * nb), theirs(n * nb), answers(n * mb), received(n * mb);
  for (int p = 0; p < n; ++p) {
    const Nonce x = random_nonce();
    std::memcpy(mine.data() + p * nb, x.data(), nb);
  }
  auto exchange = [&](std::vector<unsigned char>& out, std::vector<unsigned char>& in,
                      std::size_t each) {
    const uint64_t slot = static_cast<uint64_t>(context_->nextSlot());
    auto send = context_->createUnboundBuffer(out.data(), out.size());
    auto recv = context_->createUnboundBuffer(in.data(), in.size());
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      recv->recv(p, slot, p * each, each);
      send->send(p, slot, p * each, each);
    }
    for (int p = 0; p < n - 1; ++p) {
      if (!recv->waitRecv(left(until)) || !send->waitSend(left(until)))
        fail(WT_ERR_ABORTED, "the pair challenge was interrupted");
    }
  };
  exchange(mine, theirs, nb);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const Mac a = pair_answer(secret, theirs.data() + p * nb, me, p);
    std::memcpy(answers.data() + p * mb, a.data(), mb);
  }
  exchange(answers, received, mb);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    Mac got{};
    std::memcpy(got.data(), received.data() + p * mb, mb);
    if (!same_mac(got, pair_answer(secret, mine.data() + p * nb, p, me))) {
      const std::string why = fmt::format(
          "the peer connected as rank {} did not prove the session secret (a stranger on the "
          "pair's port?); no weight was sent",
          p);
      if (options_.warn) options_.warn(why);
      fail(WT_ERR_REMOTE, "{}", why);
    }
  }
}

void BroadcastGroup::run(void* data, std::size_t bytes, int root, const std::string& what) {
  auto aborted = [&] { fail(WT_ERR_ABORTED, "{}: aborted", what); };
  gloo_call(what, [&] {
    gloo::BroadcastOptions b(context_);
    auto buffer = context_->createUnboundBuffer(data, bytes);
    {
      std::lock_guard<std::mutex> l(abort_mu_);
      if (aborted_) aborted();
      current_ = buffer.get();
    }
    b.setOutput<uint8_t>(std::move(buffer));
    b.setRoot(root);
    b.setTimeout(options_.transfer_timeout);
    try {
      gloo::broadcast(b);
    } catch (...) {
      std::lock_guard<std::mutex> l(abort_mu_);
      current_ = nullptr;
      throw;
    }
    std::lock_guard<std::mutex> l(abort_mu_);
    current_ = nullptr;
    // An interrupted wait returns as if done: only the flag tells. The buffer goes with `b`, so
    // bytes arriving later are not written into `data`.
    if (aborted_) aborted();
  });
}

void BroadcastGroup::broadcast(void* data, std::size_t bytes, int root, const std::string& what) {
  if (broken_) {
    std::lock_guard<std::mutex> l(abort_mu_);
    if (aborted_) fail(WT_ERR_ABORTED, "{}: aborted", what);
    fail(WT_ERR_STATE, "the group broke in an earlier transfer; initialise again");
  }
  SigpipeBlocked no_sigpipe;
  try {
    // The frame first: a receiver expecting another length refuses before any byte lands.
    unsigned char frame[kFrameBytes] = {};
    const uint32_t number = sequence_++;
    if (options_.rank == root) {
      std::memcpy(frame, kFrameMagic, 4);
      put_u32(frame + 4, number);
      for (int i = 0; i < 8; ++i)
        frame[8 + i] = static_cast<unsigned char>((static_cast<uint64_t>(bytes) >> (8 * i)) & 0xff);
    }
    run(frame, sizeof frame, root, what);
    if (options_.rank != root) {
      const uint64_t sent = get_u64(frame + 8);
      if (std::memcmp(frame, kFrameMagic, 4) != 0)
        fail(WT_ERR_REMOTE, "{}: the sender's frame is not a wt broadcast frame", what);
      if (get_u32(frame + 4) != number)
        fail(WT_ERR_REMOTE,
             "{}: the sender is at broadcast {} of the session, this rank at {} (out of step)",
             what, get_u32(frame + 4), number);
      if (sent != bytes)
        fail(WT_ERR_REMOTE,
             "{}: the sender broadcast {} bytes, this rank expected {}; nothing of it was taken",
             what, sent, bytes);
    }
    if (bytes > 0) run(data, bytes, root, what);
  } catch (...) {
    broken_ = true;  // the peers' collectives no longer line up
    throw;
  }
}

void BroadcastGroup::abort() {
  // Each interrupt ends one of Gloo's waits; the broadcast may have more (one per child of the
  // root), so interrupt until it returned.
  const auto until = Clock::now() + std::chrono::seconds(5);
  for (bool first = true;; first = false) {
    {
      std::lock_guard<std::mutex> l(abort_mu_);
      aborted_ = true;
      broken_ = true;
      if (current_ == nullptr) return;
      current_->abortWaitRecv();
      current_->abortWaitSend();
    }
    if (!first && Clock::now() > until) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace wt::plugins
