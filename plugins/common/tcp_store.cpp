#include "tcp_store.hpp"

#include <wt/sdk/errors.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace wt::plugins {
namespace {

using sdk::fail;
using Clock = std::chrono::steady_clock;

constexpr uint8_t kSet = 1, kGet = 2;

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

addrinfo* resolve(const std::string& address, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0)
    fail(WT_ERR_SYSTEM, "cannot resolve rendezvous address '{}': {}", address, ::gai_strerror(rc));
  return res;
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left.count(), 1'000'000));
}

}  // namespace

// ---- server -----------------------------------------------------------------------------------

TcpStoreServer::TcpStoreServer(const std::string& address, int port, Limits limits)
    : limits_(limits) {
  addrinfo* res = resolve(address, port, true);
  int err = 0;
  for (addrinfo* a = res; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    } else {
      err = errno;
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0)
    fail(WT_ERR_SYSTEM, "cannot listen for the rendezvous on {}:{}: {}", address, port,
         std::strerror(err));
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(listen_fd_);
    fail(WT_ERR_SYSTEM, "pipe2 failed: {}", std::strerror(errno));
  }
  thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  char x = 1;
  (void)!::write(wake_[1], &x, 1);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void TcpStoreServer::serve() {
  struct Conn {
    int fd;
    std::string in, out;
    Clock::time_point request_started{};  // of the partial request in `in`
  };
  std::vector<Conn> conns;
  auto drop = [&](std::size_t i) {
    ::close(conns[i].fd);
    conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
    ++dropped_;
  };
  for (;;) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (auto& c : conns)
      fds.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    ::poll(fds.data(), fds.size(), 100);
    if (fds[0].revents) {
      for (auto& c : conns) ::close(c.fd);
      return;
    }
    const auto now = Clock::now();
    for (std::size_t i = conns.size(); i-- > 0;) {
      Conn& c = conns[i];
      const short ev = fds[i + 2].revents;
      bool bad = ev & (POLLERR | POLLNVAL);
      if (!bad && (ev & POLLOUT) && !c.out.empty()) {
        ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (n > 0)
          c.out.erase(0, static_cast<std::size_t>(n));
        else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
          bad = true;
      }
      if (!bad && (ev & (POLLIN | POLLHUP))) {
        char buf[65536];
        ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) bad = true;
        if (n > 0) {
          if (c.in.empty()) c.request_started = now;
          c.in.append(buf, static_cast<std::size_t>(n));
        }
      }
      // Complete requests, in order.
      while (!bad && c.in.size() >= 5) {
        const uint8_t op = static_cast<uint8_t>(c.in[0]);
        const uint32_t klen = get_u32(c.in.data() + 1);
        if ((op != kSet && op != kGet) || klen > limits_.max_key) {
          bad = true;
          break;
        }
        std::size_t need = 5 + klen;
        uint32_t vlen = 0;
        if (op == kSet) {
          if (c.in.size() < need + 4) break;
          vlen = get_u32(c.in.data() + need);
          if (vlen > limits_.max_value) {
            bad = true;
            break;
          }
          need += 4 + vlen;
        }
        if (c.in.size() < need) break;
        std::string key = c.in.substr(5, klen);
        if (op == kSet) {
          if (!data_.count(key) && data_.size() >= limits_.max_keys) {
            bad = true;
            break;
          }
          const char* v = c.in.data() + 5 + klen + 4;
          data_[key].assign(v, v + vlen);
          c.out.push_back('\0');
        } else {
          auto it = data_.find(key);
          if (it == data_.end()) {
            c.out.push_back('\1');
          } else {
            c.out.push_back('\0');
            put_u32(c.out, static_cast<uint32_t>(it->second.size()));
            c.out.append(it->second.data(), it->second.size());
          }
        }
        c.in.erase(0, need);
        c.request_started = now;
      }
      // A request that does not arrive whole in time, or answers piling up unread: drop the client.
      if (!bad && !c.in.empty() && now - c.request_started > limits_.request_deadline) bad = true;
      if (c.out.size() > 2 * limits_.max_value + 64) bad = true;
      if (bad) drop(i);
    }
    // Accepted after the connections polled above were served: fds[] indexes only those.
    if (fds[1].revents & POLLIN) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        if (conns.size() >= limits_.max_connections) {
          ::close(fd);
          ++dropped_;
        } else {
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          conns.push_back({fd, {}, {}, {}});
        }
      }
    }
  }
}

// ---- client -----------------------------------------------------------------------------------

TcpStoreClient::TcpStoreClient(const std::string& address, int port,
                               std::chrono::milliseconds deadline)
    : where_(address + ":" + std::to_string(port)), deadline_(deadline) {
  const auto until = Clock::now() + deadline;
  std::string last = "no attempt";
  while (fd_ < 0) {
    addrinfo* res = resolve(address, port, false);
    for (addrinfo* a = res; a != nullptr && fd_ < 0; a = a->ai_next) {
      int fd =
          ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) continue;
      int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        if (::poll(&p, 1, std::min(remaining_ms(until), 1000)) == 1) {
          int soerr = 0;
          socklen_t len = sizeof soerr;
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
          rc = soerr == 0 ? 0 : -1;
          errno = soerr;
        } else {
          errno = ETIMEDOUT;
        }
      }
      if (rc == 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fd_ = fd;
      } else {
        last = std::strerror(errno);
        ::close(fd);
      }
    }
    ::freeaddrinfo(res);
    if (fd_ >= 0) break;
    if (Clock::now() >= until)
      fail(WT_ERR_TIMEOUT, "cannot reach the rendezvous store at {} within {} ms: {}", where_,
           deadline.count(), last);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

bool TcpStoreClient::request(uint8_t op, const std::string& key, const std::vector<char>* value,
                             std::vector<char>* out, Clock::time_point deadline) {
  std::string msg;
  msg.push_back(static_cast<char>(op));
  put_u32(msg, static_cast<uint32_t>(key.size()));
  msg += key;
  if (value != nullptr) {
    put_u32(msg, static_cast<uint32_t>(value->size()));
    msg.append(value->data(), value->size());
  }
  auto io = [&](bool sending, char* p, std::size_t n) {
    while (n > 0) {
      pollfd pf{fd_, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
      int ms = remaining_ms(deadline);
      if (ms == 0 || ::poll(&pf, 1, ms) != 1)
        fail(WT_ERR_TIMEOUT, "the rendezvous store at {} did not answer in time (key '{}')", where_,
             key);
      ssize_t r = sending ? ::send(fd_, p, n, MSG_NOSIGNAL) : ::recv(fd_, p, n, 0);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        fail(WT_ERR_REMOTE, "the rendezvous store at {} closed the connection (key '{}'){}", where_,
             key, r < 0 ? std::string(": ") + std::strerror(errno) : "");
      if (r > 0) {
        p += r;
        n -= static_cast<std::size_t>(r);
      }
    }
  };
  io(true, msg.data(), msg.size());
  char status = 0;
  io(false, &status, 1);
  if (op != kGet || status != 0) return status == 0;
  char len[4];
  io(false, len, 4);
  out->resize(get_u32(len));
  io(false, out->data(), out->size());
  return true;
}

void TcpStoreClient::set(const std::string& key, const std::vector<char>& data) {
  std::lock_guard<std::mutex> l(mu_);
  request(kSet, key, &data, nullptr, Clock::now() + deadline_);
}

std::vector<char> TcpStoreClient::get(const std::string& key) {
  wait({key}, deadline_);
  std::lock_guard<std::mutex> l(mu_);
  std::vector<char> out;
  if (!request(kGet, key, nullptr, &out, Clock::now() + deadline_))
    fail(WT_ERR_STATE, "the rendezvous store at {} lost key '{}'", where_, key);
  return out;
}

void TcpStoreClient::wait(const std::vector<std::string>& keys) {
  wait(keys, deadline_);
}

void TcpStoreClient::wait(const std::vector<std::string>& keys,
                          const std::chrono::milliseconds& timeout) {
  const auto until = Clock::now() + timeout;
  std::vector<char> ignored;
  for (const auto& key : keys) {
    for (;;) {
      {
        // Each poll has the connection's deadline; the wait as a whole has `timeout`.
        std::lock_guard<std::mutex> l(mu_);
        if (request(kGet, key, nullptr, &ignored, Clock::now() + deadline_)) break;
      }
      if (Clock::now() >= until)
        fail(WT_ERR_TIMEOUT,
             "rendezvous at {}: key '{}' did not appear within {} ms (a peer that never joined?)",
             where_, key, timeout.count());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

}  // namespace wt::plugins
