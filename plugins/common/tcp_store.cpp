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

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

namespace wt::plugins {
namespace {

using sdk::fail;
using Clock = std::chrono::steady_clock;

constexpr uint8_t kSet = 1, kGet = 2, kPairKeys = 3, kRaise = 4, kFate = 5;
constexpr uint8_t kDone = 0, kMissing = 1, kExists = 2, kFull = 3, kNotYours = 4;
constexpr uint8_t kWelcome = 0, kRefused = 1;
constexpr char kMagic[4] = {'W', 'T', 'S', '3'};
constexpr std::size_t kKey = SessionSecret::kBytes;
constexpr std::size_t kMac = sizeof(Mac);
constexpr std::size_t kMaxUnread = std::size_t{2} << 20;

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// What a MAC of one request or answer covers: both nonces, its sequence number, its bytes.
std::string mac_input(const Nonce& s, const Nonce& c, uint64_t seq, std::string_view bytes) {
  std::string m(as_view(s));
  m.append(as_view(c));
  for (int i = 0; i < 8; ++i) m.push_back(static_cast<char>((seq >> (8 * i)) & 0xff));
  m.append(bytes);
  return m;
}
std::string hello_input(const Nonce& s, const Nonce& c, uint32_t rank) {
  std::string m = std::string(as_view(s)).append(as_view(c));
  put_u32(m, rank);
  return m;
}
// The pad the key of the pair (rank, peer) travels under, to `rank` on one connection.
Mac pair_key_pad(const SessionSecret& rank_key, const Nonce& s, const Nonce& c, int peer) {
  return rank_key.mac("wt pair key wrap", hello_input(s, c, static_cast<uint32_t>(peer)));
}
// The largest address a pair publishes (Gloo's Address::kMaxByteSize).
constexpr std::size_t kMaxPairAddress = 192;

// Whether `rank` may set `key` (of a value of `bytes`): a rank publishes its own address and host
// keys only, and the addresses of its own pairs in the mesh ("pair_<rank>_<peer>").
bool owns(int rank, const std::string& key, std::size_t bytes,
          const TcpStoreServer::Limits& limits) {
  const std::string r = std::to_string(rank);
  if (key == r || key == "rank_" + r) return true;
  const std::string mine = "pair_" + r + "_";
  if (key.size() <= mine.size() || key.size() > mine.size() + 5 || key.rfind(mine, 0) != 0 ||
      bytes > kMaxPairAddress)
    return false;
  const char* digits = key.data() + mine.size();
  const char* end = key.data() + key.size();
  int peer = -1;
  if (std::from_chars(digits, end, peer).ptr != end || peer < 0 ||
      (*digits == '0' && end - digits > 1))  // one spelling per peer: no sign, no leading zero
    return false;
  return peer < limits.world_size && limits.pairs.connects(rank, peer);
}
Mac mac_at(const char* p) {
  Mac m{};
  std::memcpy(m.data(), p, m.size());
  return m;
}
void append_mac(std::string& out, const Mac& m) {
  out.append(reinterpret_cast<const char*>(m.data()), m.size());
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

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  char buf[INET6_ADDRSTRLEN] = "?";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "an unknown peer";
  const bool v6 = ss.ss_family == AF_INET6;
  const void* a = v6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
                     : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
  ::inet_ntop(ss.ss_family, a, buf, sizeof buf);
  const int port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                            : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return std::string(buf) + ":" + std::to_string(port);
}

}  // namespace

TcpStoreServer::Limits TcpStoreServer::Limits::for_world(int world_size) {
  Limits l;
  const auto n = static_cast<std::size_t>(std::max(world_size, 1));
  l.max_keys = 4 * n + 16;
  l.max_connections = n + 16;
  l.world_size = static_cast<int>(n);
  l.max_stored_bytes =
      std::min<std::size_t>(std::size_t{64} << 20, (n + 4) * (std::size_t{64} << 10));
  return l;
}

TcpStoreServer::Limits TcpStoreServer::Limits::for_mesh(int world_size, const MeshPairs& shape) {
  Limits l = for_world(world_size);
  l.pairs = shape;
  const uint64_t pairs = shape.pair_count(world_size);
  // An address is at most 192 bytes (Gloo's Address::kMaxByteSize), its key about 20: 256 bytes
  // an entry is room to spare. Both ends of each pair publish one.
  constexpr uint64_t kEntry = 256;
  const uint64_t n = static_cast<uint64_t>(std::max(world_size, 1));
  l.max_keys = static_cast<std::size_t>(2 * pairs + 4 * n + 16);
  l.max_stored_bytes =
      std::max<std::size_t>(l.max_stored_bytes, static_cast<std::size_t>(2 * pairs * kEntry));
  return l;
}

std::string pair_address_key(int from, int to) {
  return fmt::format("pair_{}_{}", from, to);
}

// ---- server -----------------------------------------------------------------------------------

struct TcpStoreServer::Conn {
  int fd = -1;
  std::string who;
  std::string in, out;
  bool authenticated = false;
  bool refused = false;  // told so; closed once that is sent
  int rank = -1;
  SessionSecret key;  // the connected rank's
  Nonce snonce{}, cnonce{};
  uint64_t seq = 0;
  Clock::time_point opened{}, last_request{}, request_started{};
};

TcpStoreServer::TcpStoreServer(const std::string& address, int port, const SessionSecret& secret,
                               Limits limits, Warn warn)
    : secret_(secret), limits_(limits), warn_(std::move(warn)) {
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

std::string TcpStoreServer::failure() const {
  std::lock_guard<std::mutex> l(failure_mu_);
  return failure_;
}

void TcpStoreServer::refuse(const Conn& c, const std::string& why) {
  ++rejected_;
  if (warn_) warn_(fmt::format("rendezvous store: dropped the connection from {}: {}", c.who, why));
}

void TcpStoreServer::serve() {
  try {
    serve_loop();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> l(failure_mu_);
    failure_ = fmt::format("the rendezvous store stopped: {}", e.what());
  }
  if (warn_ && !failure().empty()) warn_(failure());
}

// Consumes what `c.in` holds; false when the connection must be dropped.
bool TcpStoreServer::handle_input(Conn& c, Clock::time_point now) {
  if (c.refused) {
    c.in.clear();
    return true;
  }
  if (!c.authenticated && !authenticate(c, now)) return true;
  while (c.in.size() >= 5) {
    const uint8_t op = static_cast<uint8_t>(c.in[0]);
    const uint32_t klen = get_u32(c.in.data() + 1);
    const bool about_a_round = op == kRaise || op == kFate;  // the key: the round, 4 bytes
    if (op < kSet || op > kFate || klen > limits_.max_key || (op == kPairKeys && klen != 0) ||
        (about_a_round && klen != 4)) {
      refuse(c, "a malformed request");
      return false;
    }
    std::size_t body = 5 + klen;
    uint32_t vlen = 0;
    if (op == kSet || op == kRaise) {
      if (c.in.size() < body + 4) break;
      vlen = get_u32(c.in.data() + body);
      const std::size_t most = op == kSet ? limits_.max_value : kMaxFateReason;
      if (vlen > most) {
        refuse(c, fmt::format("a value of {} bytes (at most {})", vlen, most));
        return false;
      }
      body += 4 + vlen;
    }
    if (c.in.size() < body + kMac) break;
    if (!serve_request(c, op, klen, vlen, body, now)) return false;
  }
  return true;
}

// The client's hello, once all of it has arrived: false until the connection is authenticated
// (the hello is not all here yet, or it was refused and the refusal is queued).
bool TcpStoreServer::authenticate(Conn& c, Clock::time_point now) {
  constexpr std::size_t kHello = sizeof(Nonce) + 4 + kMac;
  if (c.in.size() < kHello) return false;
  std::memcpy(c.cnonce.data(), c.in.data(), sizeof(Nonce));
  const uint32_t rank = get_u32(c.in.data() + sizeof(Nonce));
  const auto hello = hello_input(c.snonce, c.cnonce, rank);
  const bool known = rank < static_cast<uint32_t>(limits_.world_size);
  const SessionSecret key = SessionKeys::rank_key(secret_, known ? static_cast<int>(rank) : 0);
  if (!known || !same_mac(key.mac("wt store hello", hello), mac_at(c.in.data() + kHello - kMac))) {
    refuse(c, known ? fmt::format("it did not prove the key of rank {}", rank)
                    : fmt::format("it connected as rank {}, outside a world of {}", rank,
                                  limits_.world_size));
    c.out.push_back(static_cast<char>(kRefused));  // said, not only dropped: see the client
    c.in.clear();
    c.refused = true;
    return false;
  }
  c.authenticated = true;
  c.rank = static_cast<int>(rank);
  c.key = key;
  c.last_request = now;
  c.in.erase(0, kHello);
  c.out.push_back(static_cast<char>(kWelcome));
  append_mac(c.out, key.mac("wt store welcome", hello));
  return true;
}

// Answers the whole request at the front of `c.in` (`body` bytes, then its MAC) and consumes it;
// false when its MAC is not the connected rank's.
bool TcpStoreServer::serve_request(Conn& c, uint8_t op, uint32_t klen, uint32_t vlen,
                                   std::size_t body, Clock::time_point now) {
  const std::string_view request(c.in.data(), body);
  if (!same_mac(c.key.mac("wt store request", mac_input(c.snonce, c.cnonce, c.seq, request)),
                mac_at(c.in.data() + body))) {
    refuse(c, fmt::format("a request whose MAC is not rank {}'s", c.rank));
    return false;
  }
  const std::string key = c.in.substr(5, klen);
  // SET's and RAISE's value ends the request (the others have none: vlen is 0).
  const std::string_view value(c.in.data() + body - vlen, vlen);
  const std::string answer = answer_request(c, op, key, value);
  const Mac m = c.key.mac("wt store answer", mac_input(c.snonce, c.cnonce, c.seq, answer));
  ++c.seq;
  c.out += answer;
  append_mac(c.out, m);
  c.in.erase(0, body + kMac);
  c.last_request = now;
  c.request_started = now;
  return true;
}

// The answer to one authenticated, well-formed request, without its MAC.
std::string TcpStoreServer::answer_request(const Conn& c, uint8_t op, const std::string& key,
                                           std::string_view value) {
  if (op == kPairKeys) return answer_pair_keys(c);
  if (op == kRaise) return answer_raise(c, key, value);
  if (op == kFate) return answer_fate(key);
  if (op == kSet) return answer_set(c, key, value);
  return answer_get(key);
}

std::string TcpStoreServer::answer_pair_keys(const Conn& c) {
  std::string answer;
  if (!pair_keys_served_.insert(c.rank).second) {
    // Once per rank: each answer costs the store's one thread O(world) MACs, and a rank needs
    // them once per mesh; an insider asking again and again would hold the others up.
    if (warn_)
      warn_(fmt::format("rendezvous store: rank {} ({}) asked for its pair keys again; refused",
                        c.rank, c.who));
    answer.push_back(static_cast<char>(kExists));
    return answer;
  }
  answer.push_back(static_cast<char>(kDone));
  const std::vector<int> higher = limits_.pairs.higher_peers(c.rank, limits_.world_size);
  put_u32(answer, static_cast<uint32_t>(kKey * higher.size()));
  for (int peer : higher) {
    const SessionSecret pair = SessionKeys::pair_key(SessionKeys::rank_key(secret_, peer), c.rank)
                                   .masked(pair_key_pad(c.key, c.snonce, c.cnonce, peer));
    answer.append(pair.bytes());
  }
  return answer;
}

// The first rank to end a round names it; what it says is kept for the latest rounds only.
std::string TcpStoreServer::answer_raise(const Conn& c, const std::string& key,
                                         std::string_view value) {
  std::string answer;
  const uint32_t round = get_u32(key.data());
  if (fates_.count(round)) {
    answer.push_back(static_cast<char>(kExists));
    return answer;
  }
  fates_[round] = {c.rank, std::string(value)};
  fate_order_.push_back(round);
  if (fate_order_.size() > kFatesKept) {  // the first raised goes, whatever its number
    fates_.erase(fate_order_.front());
    fate_order_.pop_front();
  }
  answer.push_back(static_cast<char>(kDone));
  return answer;
}

std::string TcpStoreServer::answer_fate(const std::string& key) {
  std::string answer;
  if (auto it = fates_.find(get_u32(key.data())); it == fates_.end()) {
    answer.push_back(static_cast<char>(kMissing));
  } else {
    answer.push_back(static_cast<char>(kDone));
    put_u32(answer, static_cast<uint32_t>(4 + it->second.second.size()));
    put_u32(answer, static_cast<uint32_t>(it->second.first));
    answer += it->second.second;
  }
  return answer;
}

std::string TcpStoreServer::answer_set(const Conn& c, const std::string& key,
                                       std::string_view value) {
  std::string answer;
  const uint32_t vlen = static_cast<uint32_t>(value.size());
  if (!owns(c.rank, key, vlen, limits_)) {
    if (warn_)
      warn_(
          fmt::format("rendezvous store: rank {} ({}) tried to set key '{}', which is not its "
                      "own; refused",
                      c.rank, c.who, key));
    answer.push_back(static_cast<char>(kNotYours));
  } else if (data_.count(key)) {
    answer.push_back(static_cast<char>(kExists));
  } else if (data_.size() >= limits_.max_keys ||
             stored_bytes_ + vlen + key.size() > limits_.max_stored_bytes) {
    answer.push_back(static_cast<char>(kFull));
  } else {
    data_[key].assign(value.data(), value.data() + vlen);
    stored_bytes_ += vlen + key.size();
    answer.push_back(static_cast<char>(kDone));
  }
  return answer;
}

std::string TcpStoreServer::answer_get(const std::string& key) {
  std::string answer;
  if (auto it = data_.find(key); it == data_.end()) {
    answer.push_back(static_cast<char>(kMissing));
  } else {
    answer.push_back(static_cast<char>(kDone));
    put_u32(answer, static_cast<uint32_t>(it->second.size()));
    answer.append(it->second.data(), it->second.size());
  }
  return answer;
}

void TcpStoreServer::serve_loop() {
  std::vector<std::unique_ptr<Conn>> conns;
  struct CloseAll {
    std::vector<std::unique_ptr<Conn>>& c;
    ~CloseAll() {
      for (auto& x : c) ::close(x->fd);
    }
  } close_all{conns};
  const std::size_t max_request =
      5 + limits_.max_key + 4 + std::max(limits_.max_value, kMaxFateReason) + kMac;
  for (;;) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (auto& c : conns)
      fds.push_back({c->fd, static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
    ::poll(fds.data(), fds.size(), 100);
    if (fds[0].revents) return;
    const auto now = Clock::now();
    for (std::size_t i = conns.size(); i-- > 0;)
      if (serve_connection(*conns[i], fds[i + 2].revents, max_request, now)) drop(conns, i);
    // Accepted after the connections polled above were served: fds[] indexes only those.
    if (fds[1].revents & POLLIN) accept_connection(conns, now);
  }
}

void TcpStoreServer::drop(std::vector<std::unique_ptr<Conn>>& conns, std::size_t i) {
  ::close(conns[i]->fd);
  conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
  ++dropped_;
}

// One connection's turn after a poll that reported `ev` for it: sends what it can, reads and
// handles what came, enforces the deadlines. True when the connection must be dropped.
bool TcpStoreServer::serve_connection(Conn& c, short ev, std::size_t max_request,
                                      Clock::time_point now) {
  bool bad = ev & (POLLERR | POLLNVAL);
  if (!bad && (ev & POLLOUT) && !c.out.empty()) {
    ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n > 0)
      c.out.erase(0, static_cast<std::size_t>(n));
    else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      bad = true;
  }
  if (!bad && c.refused && c.out.empty()) bad = true;
  if (!bad && (ev & (POLLIN | POLLHUP))) {
    char buf[65536];
    // Never more than one request's worth held: a client cannot make the server buffer more.
    const std::size_t room = max_request + kMac - std::min(c.in.size(), max_request + kMac);
    ssize_t n = room == 0 ? 0 : ::recv(c.fd, buf, std::min(sizeof buf, room), 0);
    if (room == 0 || n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) bad = true;
    if (n > 0) {
      if (c.in.empty()) c.request_started = now;
      c.in.append(buf, static_cast<std::size_t>(n));
      bad = !handle_input(c, now);
    }
  }
  if (!bad && !c.authenticated && now - c.opened > limits_.auth_deadline) {
    refuse(c, fmt::format("it did not authenticate within {} ms", limits_.auth_deadline.count()));
    bad = true;
  }
  if (!bad && !c.in.empty() && now - c.request_started > limits_.request_deadline) bad = true;
  if (!bad && c.in.empty() && c.authenticated && now - c.last_request > limits_.idle_deadline)
    bad = true;
  if (c.out.size() > kMaxUnread + limits_.max_value) bad = true;
  return bad;
}

// Takes the connection waiting on the listening socket, if any; when the connections are at
// their limit, it gets the slot of the oldest one not yet authenticated, or is closed at once.
void TcpStoreServer::accept_connection(std::vector<std::unique_ptr<Conn>>& conns,
                                       Clock::time_point now) {
  int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  if (conns.size() >= limits_.max_connections) {
    // Strangers cannot hold the slots: the oldest connection still unauthenticated goes.
    auto oldest =
        std::find_if(conns.begin(), conns.end(), [](const auto& c) { return !c->authenticated; });
    if (oldest != conns.end()) drop(conns, static_cast<std::size_t>(oldest - conns.begin()));
  }
  if (conns.size() >= limits_.max_connections) {
    ::close(fd);
    ++dropped_;
  } else {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->who = peer_name(fd);
    c->opened = now;
    c->snonce = random_nonce();
    c->out.assign(kMagic, sizeof kMagic);
    c->out.append(as_view(c->snonce));
    conns.push_back(std::move(c));
  }
}

// ---- client -----------------------------------------------------------------------------------

TcpStoreClient::TcpStoreClient(const std::string& address, int port, const SessionKeys& keys,
                               Clock::time_point until, std::function<bool()> give_up)
    : where_(address.find(':') != std::string::npos ? "[" + address + "]:" + std::to_string(port)
                                                    : address + ":" + std::to_string(port)),
      rank_(keys.rank()),
      key_(keys.own_key()),
      until_(until),
      give_up_(std::move(give_up)) {
  std::string last = "no attempt";
  for (;;) {
    addrinfo* res = resolve(address, port, false);
    for (addrinfo* a = res; a != nullptr && fd_ < 0; a = a->ai_next) {
      int fd =
          ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) continue;
      int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        if (::poll(&p, 1, std::min(remaining_ms(until_), 1000)) == 1) {
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
    bool foreign = false;
    if (fd_ >= 0 && try_connect(&last, &foreign)) break;
    // Our own sender listens before it tells anyone where to meet: a store that is not this
    // session's will not become it.
    if (foreign) {
      ::close(fd_);
      fd_ = -1;
      fail(WT_ERR_REMOTE, "the rendezvous store at {} refused this session: {}", where_, last);
    }
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    if (Clock::now() >= until_)
      fail(WT_ERR_TIMEOUT, "cannot reach the rendezvous store at {} in time: {}", where_, last);
    if (give_up_ && give_up_()) fail(WT_ERR_ABORTED, "the rendezvous at {} was given up", where_);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// Sends or receives exactly n bytes by `until`; the error names `what`.
void io(int fd, bool sending, char* p, std::size_t n, Clock::time_point until,
        const std::string& where, const std::string& what) {
  while (n > 0) {
    pollfd pf{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    int ms = remaining_ms(until);
    if (ms == 0 || ::poll(&pf, 1, ms) != 1)
      fail(WT_ERR_TIMEOUT, "the rendezvous store at {} did not answer in time ({})", where, what);
    ssize_t r = sending ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      fail(WT_ERR_REMOTE, "the rendezvous store at {} closed the connection ({}){}", where, what,
           r < 0 ? std::string(": ") + std::strerror(errno) : "");
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
    }
  }
}

}  // namespace

// The handshake on a fresh connection: false (with the reason) when the server is not up yet
// or not this session's.
bool TcpStoreClient::try_connect(std::string* why, bool* foreign) {
  try {
    char hello[4 + sizeof(Nonce)];
    io(fd_, false, hello, sizeof hello, until_, where_, "hello");
    if (std::memcmp(hello, kMagic, 4) != 0) {
      *why = "what listens there is not a wt rendezvous store of this version";
      *foreign = true;
      return false;
    }
    std::memcpy(snonce_.data(), hello + 4, sizeof(Nonce));
    cnonce_ = random_nonce();
    const auto input = hello_input(snonce_, cnonce_, static_cast<uint32_t>(rank_));
    std::string mine(as_view(cnonce_));
    put_u32(mine, static_cast<uint32_t>(rank_));
    append_mac(mine, key_.mac("wt store hello", input));
    io(fd_, true, mine.data(), mine.size(), until_, where_, "hello");
    // A connection closed before the answer is one the store made room with under a flood (or a
    // store going down): retried. Only a store that says so refused this rank.
    char status = 0;
    io(fd_, false, &status, 1, until_, where_, "hello");
    if (static_cast<uint8_t>(status) != kWelcome) {
      *why = fmt::format(
          "it refused rank {}'s key: it is another session's store (another job's on this "
          "port?), or this rank's key is not the one its trainer minted",
          rank_);
      *foreign = true;
      return false;
    }
    char welcome[kMac];
    io(fd_, false, welcome, sizeof welcome, until_, where_, "hello");
    if (!same_mac(key_.mac("wt store welcome", input), mac_at(welcome))) {
      *why = fmt::format(
          "it does not hold this session's secret: it could not prove rank {}'s key (another "
          "job's store on this port?)",
          rank_);
      *foreign = true;
      return false;
    }
    return true;
  } catch (const sdk::Error& e) {
    *why = e.what();  // not up yet, or it made room for another connection
    return false;
  }
}

uint8_t TcpStoreClient::request(uint8_t op, const std::string& key, const std::vector<char>* value,
                                std::vector<char>* out, std::optional<Clock::time_point> by) {
  const Clock::time_point until = by.value_or(until_);
  const std::string& wire_key = key;
  const std::string what = op == kPairKeys ? std::string("the pair keys")
                           : op == kRaise || op == kFate
                               ? fmt::format("the fate of round {}", get_u32(key.data()))
                               : "key '" + key + "'";
  std::string msg;
  msg.push_back(static_cast<char>(op));
  put_u32(msg, static_cast<uint32_t>(wire_key.size()));
  msg += wire_key;
  if (value != nullptr) {
    put_u32(msg, static_cast<uint32_t>(value->size()));
    msg.append(value->data(), value->size());
  }
  append_mac(
      msg, key_.mac("wt store request", mac_input(snonce_, cnonce_, seq_, std::string_view(msg))));
  io(fd_, true, msg.data(), msg.size(), until, where_, what);
  std::string answer(1, '\0');
  io(fd_, false, answer.data(), 1, until, where_, what);
  const auto status = static_cast<uint8_t>(answer[0]);
  if ((op == kGet || op == kPairKeys || op == kFate) && status == kDone) {
    char len[4];
    io(fd_, false, len, 4, until, where_, what);
    const uint32_t n = get_u32(len);
    const std::size_t most = op == kGet    ? std::size_t{1} << 20
                             : op == kFate ? 4 + kMaxFateReason
                                           : kKey << 16;
    if (n > most)
      fail(WT_ERR_REMOTE, "the rendezvous store at {} answered {} with {} bytes (at most {})",
           where_, what, n, most);
    answer.append(len, 4);
    out->resize(n);
    io(fd_, false, out->data(), n, until, where_, what);
    answer.append(out->data(), n);
  }
  char mac[kMac];
  io(fd_, false, mac, kMac, until, where_, what);
  if (!same_mac(key_.mac("wt store answer", mac_input(snonce_, cnonce_, seq_, answer)),
                mac_at(mac)))
    fail(WT_ERR_REMOTE, "the rendezvous store at {} answered {} without this session's MAC", where_,
         what);
  ++seq_;
  if (status > kNotYours)
    fail(WT_ERR_REMOTE, "the rendezvous store at {} answered {} with status {}", where_, what,
         status);
  return status;
}

void TcpStoreClient::set(const std::string& key, const std::vector<char>& data) {
  std::lock_guard<std::mutex> l(mu_);
  if (data.size() > (std::size_t{1} << 20))
    fail(WT_ERR_INVALID_ARGUMENT, "rendezvous key '{}': a value of {} bytes (at most 1 MiB)", key,
         data.size());
  const uint8_t status = request(kSet, key, &data, nullptr);
  if (status == kExists)
    fail(WT_ERR_STATE,
         "rendezvous at {}: key '{}' is already set (two ranks with the same number?)", where_,
         key);
  if (status == kFull)
    fail(WT_ERR_REMOTE, "rendezvous at {}: the store is full (key '{}')", where_, key);
  if (status == kNotYours)
    fail(WT_ERR_INVALID_ARGUMENT,
         "rendezvous at {}: rank {} may not set key '{}' (a rank sets its own keys only, and a "
         "pair's address only for its own pairs, in at most 192 bytes)",
         where_, rank_, key);
}

void TcpStoreClient::learn_pair_keys(SessionKeys& keys, const std::vector<int>& higher_peers) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<char> out;
  if (request(kPairKeys, "", nullptr, &out) != kDone)
    fail(WT_ERR_REMOTE,
         "the rendezvous store at {} gave rank {} no pair keys (it hands them to each rank once)",
         where_, rank_);
  const auto expect = kKey * higher_peers.size();
  if (out.size() != expect)
    fail(WT_ERR_REMOTE,
         "the rendezvous store at {} gave rank {} {} bytes of pair keys for {} pair(s) with higher "
         "ranks ({} expected)",
         where_, rank_, out.size(), higher_peers.size(), expect);
  for (std::size_t i = 0; i < higher_peers.size(); ++i) {
    const int peer = higher_peers[i];
    const auto at = kKey * i;
    keys.learn_pair_key(peer, SessionSecret::from_bytes(std::string_view(out.data() + at, kKey))
                                  .masked(pair_key_pad(key_, snonce_, cnonce_, peer)));
  }
}

namespace {
std::string round_key(uint32_t round) {
  std::string k;
  put_u32(k, round);
  return k;
}
}  // namespace

bool TcpStoreClient::raise_fate(uint32_t round, const std::string& why) {
  std::lock_guard<std::mutex> l(mu_);
  const std::string said = why.substr(0, kMaxFateReason);
  const std::vector<char> value(said.begin(), said.end());
  return request(kRaise, round_key(round), &value, nullptr) == kDone;
}

std::optional<TcpStoreClient::Fate> TcpStoreClient::fate(uint32_t round,
                                                         std::chrono::milliseconds within) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<char> out;
  if (request(kFate, round_key(round), nullptr, &out, Clock::now() + within) != kDone)
    return std::nullopt;
  if (out.size() < 4)
    fail(WT_ERR_REMOTE, "the rendezvous store at {} answered the fate of round {} with {} bytes",
         where_, round, out.size());
  return Fate{static_cast<int>(get_u32(out.data())), std::string(out.data() + 4, out.size() - 4)};
}

std::vector<char> TcpStoreClient::get(const std::string& key) {
  std::vector<char> out;
  poll(key, until_, &out);  // fetched once, when it is there
  return out;
}

void TcpStoreClient::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::duration_cast<std::chrono::milliseconds>(until_ - Clock::now()));
}

void TcpStoreClient::wait(const std::vector<std::string>& keys,
                          const std::chrono::milliseconds& timeout) {
  // Gloo passes its own timeout per key; the rendezvous's deadline bounds them all.
  const auto until = std::min(until_, Clock::now() + timeout);
  std::vector<char> ignored;
  for (const auto& key : keys) poll(key, until, &ignored);
}

void TcpStoreClient::poll(const std::string& key, Clock::time_point until,
                          std::vector<char>* value) {
  const auto total = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
  const auto missing = [&] {
    fail(WT_ERR_TIMEOUT,
         "rendezvous at {}: key '{}' did not appear within {} ms (a peer that never joined?)",
         where_, key, std::max<int64_t>(total.count(), 0));
  };
  for (;;) {
    try {
      std::lock_guard<std::mutex> l(mu_);
      if (request(kGet, key, nullptr, value) == kDone) return;
    } catch (const sdk::Error& e) {
      // The deadline fell inside a request: the key is what is missing, not the store.
      if (e.code() == WT_ERR_TIMEOUT && Clock::now() + std::chrono::milliseconds(50) >= until_)
        missing();
      throw;
    }
    if (Clock::now() >= until) missing();
    if (give_up_ && give_up_())
      fail(WT_ERR_ABORTED, "the rendezvous at {} was given up while waiting for key '{}'", where_,
           key);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace wt::plugins
