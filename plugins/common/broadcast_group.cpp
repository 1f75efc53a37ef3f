#include "broadcast_group.hpp"

#include <wt/sdk/errors.hpp>

#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/transport/tcp/device.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

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

}  // namespace

BroadcastGroup::BroadcastGroup(const Options& o) : options_(o) {
  if (o.world_size < 2 || o.rank < 0 || o.rank >= o.world_size)
    fail(WT_ERR_INVALID_ARGUMENT, "rank {} is not in a world of size {}", o.rank, o.world_size);
  if (o.rank == 0) server_ = std::make_unique<TcpStoreServer>(o.master_address, o.master_port);
  const std::string what = fmt::format("rendezvous of {} ranks at {}:{} (this is rank {})",
                                       o.world_size, o.master_address, o.master_port, o.rank);
  gloo_call(what, [&] {
    TcpStoreClient store(o.master_address, o.master_port, o.rendezvous_timeout);
    gloo::transport::tcp::attr attr(local_address_towards(o.master_address).c_str());
    auto device = gloo::transport::tcp::CreateDevice(attr);
    context_ = std::make_shared<gloo::rendezvous::Context>(o.rank, o.world_size);
    context_->setTimeout(o.rendezvous_timeout);
    context_->connectFullMesh(store, device);
    context_->setTimeout(o.transfer_timeout);
  });
}

BroadcastGroup::~BroadcastGroup() = default;

void BroadcastGroup::broadcast(void* data, std::size_t bytes, int root, const std::string& what) {
  auto aborted = [&] {
    broken_ = true;
    fail(WT_ERR_ABORTED, "{}: aborted", what);
  };
  if (broken_) {
    std::lock_guard<std::mutex> l(abort_mu_);
    if (aborted_) aborted();
    fail(WT_ERR_STATE, "the group broke in an earlier transfer; initialise again");
  }
  if (bytes == 0) return;
  try {
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
  } catch (...) {
    broken_ = true;  // the peers' collectives no longer line up
    throw;
  }
}

void BroadcastGroup::abort() {
  std::lock_guard<std::mutex> l(abort_mu_);
  aborted_ = true;
  if (current_ != nullptr) {
    current_->abortWaitRecv();
    current_->abortWaitSend();
  }
}

}  // namespace wt::plugins
