#include <wt/services/http_server.hpp>

#include <wt/error.hpp>
#include <wt/json_parse.hpp>
#include <wt/log.hpp>

#include <fmt/format.h>
#include <httplib.h>

#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <thread>
#include <vector>

// How connections are served. httplib 0.11.4 reads a request through a SocketStream whose only
// bound is a per-read timeout (so a byte every few seconds holds a thread forever), reads a body
// without Content-Length until EOF, and reads and discards a body announced over the limit. This
// file therefore replaces httplib's per-connection loop (Server::process_and_close_socket is
// virtual) with its own, over its own Stream, and keeps httplib for parsing, routing and writing:
//
//  - Connection::read enforces one deadline per phase: the request line and headers must arrive
//    by header_timeout (from accept, or from the first byte of a kept-alive request); the body by
//    body_timeout + length / body_min_bytes_per_second from the end of the headers. Data already
//    received is always served; only waiting is bounded. No read happens while a handler runs, so
//    handlers have no deadline. Writes get the same allowance as a body of their size.
//  - It also bounds the bytes the header phase may take (max_header_bytes; httplib grows a line
//    without limit) and the body phase (the Content-Length).
//  - Every wait also polls a pipe that stop() writes to, so stop() never waits for a client.
//  - gate() runs once the headers are parsed (process_request's setup_request hook), before
//    httplib reads any of the body: it checks the token, the route, the framing and the size, and
//    refusals are answered by the pre-routing handler, which httplib runs before reading the
//    body. The loop closes any connection whose announced body was not read (after a short
//    lingering drain, so the client sees the answer rather than a reset).

namespace wt {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

// How long a connection closed with unread input keeps draining it (so the peer reads the answer
// before a reset).
constexpr Ms kLinger{500};

// After a request with a body at least this large, free heap memory is returned to the system.
constexpr uint64_t kTrimAfterBodyBytes = uint64_t{16} << 20;

// Why a connection was cut while reading.
enum class Cut { none, timeout, too_large, stopped };

std::string seconds(Ms d) {
  return fmt::format("{:g} s", std::chrono::duration<double>(d).count());
}

// The time a transfer of `bytes` may take: body_timeout + bytes at body_min_bytes_per_second
// (at most a day, so a deadline never overflows the clock).
Ms transfer_allowance(const HttpServer::Options& o, uint64_t bytes) {
  constexpr double kDay = 24.0 * 3600 * 1000;
  double rate = static_cast<double>(std::max<std::size_t>(o.body_min_bytes_per_second, 1));
  double ms = std::min(static_cast<double>(bytes) * 1000 / rate, kDay);
  return std::min(o.body_timeout, Ms(static_cast<int64_t>(kDay))) + Ms(static_cast<int64_t>(ms));
}

// When the calling pool thread's connection was accepted.
thread_local Clock::time_point accepted_at{};

// httplib's pool, remembering when each connection was accepted: a connection that waited for a
// thread has already used that time of its header deadline.
// It also tells when a connection waits for a thread: the pool is then under pressure, and
// connections that only idle or dawdle over their headers give their thread up (Connection::wait).
class Pool final : public httplib::TaskQueue {
 public:
  explicit Pool(unsigned n) : pool_(std::max(n, 1u)) {}
  void enqueue(std::function<void()> fn) override {
    ++waiting_;
    pool_.enqueue([this, fn = std::move(fn), t = Clock::now()] {
      --waiting_;
      accepted_at = t;
      fn();
    });
  }
  void shutdown() override { pool_.shutdown(); }
  bool pressed() const { return waiting_.load() > 0; }

 private:
  std::atomic<int> waiting_{0};
  httplib::ThreadPool pool_;
};

// How long a connection may wait on its client, idle or mid-headers, while another waits for
// its thread.
constexpr Ms kYieldUnderPressure{100};

// One client connection, served by one pool thread from accept to close. Its read buffer lives as
// long as the connection, so pipelined requests are not lost between requests.
struct Connection {
  Connection(int fd, int stop_fd, const HttpServer::Options& o, const Pool* pool)
      : fd(fd), stop_fd(stop_fd), o(o), pool(pool) {}

  const int fd, stop_fd;
  const HttpServer::Options& o;
  const Pool* pool;  // null outside a listening server
  std::vector<char> buf = std::vector<char>(std::size_t{64} << 10);
  std::size_t off = 0, len = 0;

  // The request being served.
  bool in_body = false;
  Clock::time_point deadline;
  std::size_t budget = 0;  // bytes this phase may still hand to httplib
  std::size_t taken = 0;   // bytes of this request handed to httplib
  uint64_t body_length = 0, body_taken = 0;
  Ms body_allowance{0};
  Cut cut = Cut::none;
  bool wrote = false;       // some of an answer was written
  bool must_close = false;  // the framing of what follows is unknown
  bool yielded = false;     // gave its thread up to a connection waiting for one
  int refuse_status = 0;
  std::string refuse_detail;

  void begin_request(Clock::time_point header_deadline) {
    in_body = false;
    deadline = header_deadline;
    budget = o.max_header_bytes;
    taken = 0;
    body_length = body_taken = 0;
    body_allowance = Ms(0);
    cut = Cut::none;
    wrote = must_close = false;
    refuse_status = 0;
    refuse_detail.clear();
  }
  bool buffered() const { return off < len; }
  bool unread_body() const { return must_close || body_taken < body_length; }

  // 1: `events` ready on the socket; 0: `until` passed, or the pool is under pressure and this
  // wait is for an idle connection or for headers; -1: stopping or poll failed.
  int wait(short events, Clock::time_point until) {
    const bool yields = events == POLLIN && !in_body;
    const auto began = Clock::now();
    for (;;) {
      auto now = Clock::now();
      if (now >= until) return 0;
      if (yields && pool != nullptr && pool->pressed() && now - began >= kYieldUnderPressure) {
        yielded = true;
        return 0;
      }
      auto left = std::chrono::ceil<Ms>(until - now).count();
      if (yields) left = std::min<int64_t>(left, kYieldUnderPressure.count());
      pollfd fds[2] = {{fd, events, 0}, {stop_fd, POLLIN, 0}};
      int r = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left, INT_MAX)));
      if (r < 0) {
        if (errno == EINTR) continue;
        return -1;
      }
      if (fds[1].revents) {
        cut = Cut::stopped;
        return -1;
      }
      if (fds[0].revents) return 1;
    }
  }

  // Refills the buffer: >0 bytes, 0 at EOF, -1 on error or when cut.
  ssize_t fill() {
    for (;;) {
      ssize_t r = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
      if (r >= 0) {
        off = 0;
        len = static_cast<std::size_t>(r);
        return r;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      int w = wait(POLLIN, deadline);
      if (w == 0) cut = Cut::timeout;
      if (w != 1) return -1;
    }
  }

  ssize_t read(char* p, std::size_t n) {
    if (n == 0) return 0;
    if (budget == 0) {
      if (!in_body) cut = Cut::too_large;
      return -1;
    }
    if (!buffered()) {
      ssize_t r = fill();
      if (r <= 0) return r;
    }
    std::size_t k = std::min({n, len - off, budget});
    std::memcpy(p, buf.data() + off, k);
    off += k;
    budget -= k;
    taken += k;
    if (in_body) body_taken += k;
    return static_cast<ssize_t>(k);
  }

  ssize_t write(const char* p, std::size_t n) {
    auto until = Clock::now() + transfer_allowance(o, n);
    std::size_t done = 0;
    while (done < n) {
      ssize_t r = ::send(fd, p + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (r > 0) {
        done += static_cast<std::size_t>(r);
        wrote = true;
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait(POLLOUT, until) == 1) continue;
      return -1;
    }
    return static_cast<ssize_t>(n);
  }

  // An answer written directly, closing the connection (for where httplib writes none).
  void answer(int status, const char* reason, const std::string& detail) {
    std::string body = nlohmann::json{{"detail", detail}}.dump();
    std::string head = fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
        "Connection: close\r\n\r\n",
        status, reason, body.size());
    if (write(head.data(), head.size()) > 0) write(body.data(), body.size());
  }

  // After an answer that left input unread: half-close, then drain briefly before the close.
  void linger() {
    ::shutdown(fd, SHUT_WR);
    auto until = Clock::now() + kLinger;
    while (wait(POLLIN, until) == 1) {
      ssize_t r = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
    }
  }
};

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  if ((peer ? ::getpeername(fd, sa, &n) : ::getsockname(fd, sa, &n)) != 0) return;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(sa, n, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) ==
      0) {
    ip = host;
    port = std::atoi(serv);
  }
}

class ConnectionStream final : public httplib::Stream {
 public:
  explicit ConnectionStream(Connection& c) : c_(c) {}
  bool is_readable() const override { return c_.buffered() || c_.wait(POLLIN, c_.deadline) == 1; }
  bool is_writable() const override {
    return c_.wait(POLLOUT, Clock::now() + c_.o.body_timeout) == 1;
  }
  ssize_t read(char* p, size_t n) override { return c_.read(p, n); }
  ssize_t write(const char* p, size_t n) override { return c_.write(p, n); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address_of(c_.fd, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address_of(c_.fd, false, ip, port);
  }
  socket_t socket() const override { return c_.fd; }

 private:
  Connection& c_;
};

// The connection the calling pool thread serves (httplib's hooks run on that thread), and when
// that connection was accepted.
thread_local Connection* current = nullptr;

// Equal-length comparison over the whole expected string; its time depends only on the length of
// `expected`, never on where `got` first differs or on its length.
bool same_secret(std::string_view got, std::string_view expected) {
  volatile unsigned char diff = got.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    unsigned char g = i < got.size() ? static_cast<unsigned char>(got[i]) : 0;
    diff = diff | (g ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

// Strict Content-Length: digits only; repeated headers must agree.
std::optional<uint64_t> content_length(const httplib::Request& req) {
  std::optional<uint64_t> out;
  auto range = req.headers.equal_range("Content-Length");
  for (auto it = range.first; it != range.second; ++it) {
    const std::string& v = it->second;
    if (v.empty() || v.size() > 19 ||
        !std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      return std::nullopt;
    uint64_t n = std::stoull(v);
    if (out && *out != n) return std::nullopt;
    out = n;
  }
  return out;
}

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

int http_status(wt_status code) {
  switch (code) {
    case WT_ERR_INVALID_ARGUMENT:
    case WT_ERR_NOT_FOUND:
    case WT_ERR_INCOMPATIBLE:
    case WT_ERR_ABORTED:
      return 400;
    case WT_ERR_STATE:
      return 409;
    default:
      return 500;
  }
}

void reply(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  // Messages may quote bytes from a plugin or the request: never throw on invalid UTF-8.
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

void reply_error(httplib::Response& res, int status, const std::string& message) {
  reply(res, status, {{"detail", message}});
}

// Runs a route body: wt errors map to their HTTP status, anything else to 500.
template <typename F>
void guarded(httplib::Response& res, const char* route, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    logger()->warn("{}: {}", route, e.what());
    reply_error(res, http_status(e.code()), e.what());
  } catch (const std::exception& e) {
    logger()->error("{}: {}", route, e.what());
    reply_error(res, 500, e.what());
  }
}

// The 400 detail for a body parse_json refused. Syntax errors read exactly as vLLM's; limits and
// out-of-range numbers are named after the same prefix.
std::string invalid_json_detail(const std::string& what) {
  constexpr std::string_view kNotJson = "not valid JSON: ";
  if (what.rfind(kNotJson, 0) != 0) return "Invalid JSON format: " + what;
  std::string rest = what.substr(kNotJson.size());
  if (rest.find("parse_error") != std::string::npos) return "Invalid JSON format";
  if (rest.rfind("[json.exception.", 0) == 0) {
    auto end = rest.find("] ");
    if (end != std::string::npos) rest = rest.substr(end + 2);
  }
  return "Invalid JSON format: " + rest;
}

// Reads the request body through `sink`. False when it did not arrive; `res` then holds the answer.
bool receive_body(const httplib::ContentReader& reader, httplib::Response& res,
                  httplib::ContentReceiver sink) {
  if (reader(std::move(sink))) return true;
  Connection* c = current;
  if (c && c->cut == Cut::timeout)
    reply_error(res, 408,
                fmt::format("request body not received within {} ({} bytes)",
                            seconds(c->body_allowance), c->body_length));
  else if (c)
    reply_error(res, 400,
                fmt::format("request body incomplete: {} of {} bytes arrived", c->body_taken,
                            c->body_length));
  else
    reply_error(res, 400, "request body incomplete");
  return false;
}

// Reads the request body into `out`, one allocation sized from the Content-Length.
bool read_body(const httplib::ContentReader& reader, httplib::Response& res, std::string& out) {
  if (Connection* c = current) out.reserve(static_cast<std::size_t>(c->body_length));
  return receive_body(reader, res, [&](const char* d, std::size_t n) {
    out.append(d, n);
    return true;
  });
}

}  // namespace

// httplib's server with wt's connection loop; see the top of this file.
class WtHttpServer final : public httplib::Server {
 public:
  explicit WtHttpServer(HttpServer::Options o) : o_(std::move(o)) {
    if (::pipe2(stop_pipe_, O_CLOEXEC | O_NONBLOCK) != 0)
      throw Error(WT_ERR_SYSTEM, fmt::format("pipe2: {}", std::strerror(errno)));
    unsigned threads = o_.threads;
    new_task_queue = [this, threads] {
      auto* p = new Pool(threads);
      pool_ = p;
      return p;
    };
  }
  ~WtHttpServer() override {
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
  }

  // Registers a route's method and path for gate()'s 404/405 answers.
  void known(const std::string& method, const std::string& path) {
    routes_[path].insert(method);
    if (method == "GET") routes_[path].insert("HEAD");
  }

  // Wakes every connection waiting on its client; they close. Running handlers finish.
  void begin_stop() {
    stopping_ = true;
    char b = 1;
    [[maybe_unused]] auto r = ::write(stop_pipe_[1], &b, 1);
  }
  // httplib listens with a backlog of 5, so a burst of connections has SYNs dropped and retried
  // a second later; listen() again on the bound socket widens it.
  void widen_backlog() { ::listen(svr_sock_, SOMAXCONN); }

  void reset_stop() {
    char sink[64];
    while (::read(stop_pipe_[0], sink, sizeof sink) > 0) {
    }
    stopping_ = false;
  }

 private:
  bool process_and_close_socket(socket_t sock) override;
  bool serve(socket_t sock);
  void gate(Connection& c, httplib::Request& req);

  const HttpServer::Options o_;
  std::map<std::string, std::set<std::string>> routes_;
  int stop_pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::atomic<const Pool*> pool_{nullptr};  // the listening server's
};

bool WtHttpServer::process_and_close_socket(socket_t sock) {
  bool ret = false;
  try {
    ret = serve(sock);
  } catch (const std::exception& e) {
    logger()->error("http: connection dropped: {}", e.what());
  } catch (...) {
    logger()->error("http: connection dropped: unknown exception");
  }
  current = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

// The requests of one connection, until it closes, is cut, or the server stops.
bool WtHttpServer::serve(socket_t sock) {
  Connection c(sock, stop_pipe_[0], o_, pool_.load());
  current = &c;
  auto start = accepted_at == Clock::time_point{} ? Clock::now() : accepted_at;
  bool ret = false, linger = false;
  for (std::size_t count = keep_alive_max_count_; count > 0; --count) {
    if (stopping_ || svr_sock_ == INVALID_SOCKET) break;
    Clock::time_point header_deadline;
    if (count == keep_alive_max_count_) {
      header_deadline = start + o_.header_timeout;
    } else {
      if (!c.buffered() && c.wait(POLLIN, Clock::now() + o_.idle_timeout) != 1) break;
      header_deadline = Clock::now() + o_.header_timeout;
    }
    c.begin_request(header_deadline);
    ConnectionStream strm(c);
    bool closed = false;
    ret = process_request(strm, count == 1, closed,
                          [this, &c](httplib::Request& req) { gate(c, req); });
    if (!ret && !c.wrote && c.taken > 0) {
      // Cut inside the request line, where httplib gives up without answering.
      if (c.cut == Cut::timeout && c.yielded)
        c.answer(408, "Request Timeout",
                 "request headers not received in time: the server is busy, and a connection "
                 "waiting for a thread goes first");
      else if (c.cut == Cut::timeout)
        c.answer(408, "Request Timeout",
                 fmt::format("request headers not received within {}", seconds(o_.header_timeout)));
      else if (c.cut == Cut::too_large)
        c.answer(431, "Request Header Fields Too Large",
                 fmt::format("request line and headers exceed {} bytes", o_.max_header_bytes));
    }
    if (c.cut != Cut::none)
      logger()->debug("http: connection cut ({})", c.cut == Cut::timeout     ? "deadline passed"
                                                   : c.cut == Cut::too_large ? "headers too large"
                                                                             : "stopping");
    // Answered before gate() ran (a malformed request line or header, 414, 416): what follows
    // cannot be framed, so the connection ends like one with an unread body.
    if (c.taken > 0 && !c.in_body) c.must_close = true;
    if (c.cut == Cut::timeout || c.cut == Cut::too_large || (c.wrote && c.unread_body()))
      linger = true;
    // Memory a large body's parse left in malloc's free lists goes back to the system.
    if (c.body_taken >= kTrimAfterBodyBytes) ::malloc_trim(0);
    if (!ret || closed || c.cut != Cut::none || c.unread_body()) break;
  }
  current = nullptr;
  if (linger && !stopping_) c.linger();
  return ret;
}

// Runs once a request's line and headers are parsed, before httplib reads any of its body.
void WtHttpServer::gate(Connection& c, httplib::Request& req) {
  try {
    c.in_body = true;
    c.budget = 0;
    // Ranges of JSON answers are of no use, and many ranges multiply an answer in memory.
    req.ranges.clear();
    req.headers.erase("Range");

    bool chunked = req.has_header("Transfer-Encoding");
    bool has_length = req.has_header("Content-Length");
    auto length = content_length(req);
    if (length) c.body_length = *length;
    if (chunked || (has_length && !length)) c.must_close = true;

    auto refuse = [&](int status, std::string detail) {
      c.refuse_status = status;
      c.refuse_detail = std::move(detail);
      if (c.unread_body()) {
        req.headers.erase("Connection");
        req.set_header("Connection", "close");
      }
    };
    std::string encoding = lower(req.get_header_value("Content-Encoding"));
    auto route = routes_.find(req.path);
    // Under pressure every answer closes its connection, so that kept-alive pollers hand their
    // threads to whoever waits; a client without the token is never kept.
    const Pool* pool = pool_.load();
    if (pool != nullptr && pool->pressed()) {
      req.headers.erase("Connection");
      req.set_header("Connection", "close");
    }
    if (!o_.bearer_token.empty() &&
        !same_secret(req.get_header_value("Authorization"), "Bearer " + o_.bearer_token)) {
      req.headers.erase("Connection");
      req.set_header("Connection", "close");
      return refuse(401, "missing or wrong bearer token");
    }
    if (route == routes_.end()) return refuse(404, fmt::format("no route {}", req.path));
    if (!route->second.count(req.method))
      return refuse(405, fmt::format("{} does not accept {}", req.path, req.method));
    if (chunked)
      return refuse(411, "Transfer-Encoding is not accepted: send the body with a Content-Length");
    if (has_length && !length) return refuse(400, "invalid Content-Length");
    if (length && *length > o_.max_body_bytes)
      return refuse(413, fmt::format("request body of {} bytes exceeds the limit of {} bytes",
                                     *length, o_.max_body_bytes));
    if (!encoding.empty() && encoding != "identity")
      return refuse(415, fmt::format("Content-Encoding '{}' is not accepted",
                                     req.get_header_value("Content-Encoding")));
    if (lower(req.get_header_value("Content-Type")).rfind("multipart/", 0) == 0)
      return refuse(415, "multipart bodies are not accepted: send JSON");

    if (!length) {
      // No Content-Length and no Transfer-Encoding: no body (httplib would read until EOF).
      req.headers.erase("Content-Length");
      req.set_header("Content-Length", "0");
      return;
    }
    c.budget = static_cast<std::size_t>(*length);
    c.body_allowance = transfer_allowance(o_, *length);
    c.deadline = Clock::now() + c.body_allowance;
  } catch (const std::exception& e) {
    c.must_close = true;
    c.refuse_status = 500;
    c.refuse_detail = e.what();
  }
}

namespace {

// The constructor's steps, in order: limits and timeouts, the refusals gate() decided, the error
// answers, then the routes (the update session's POSTs, the read-only GETs).

void apply_limits(WtHttpServer& s, const HttpServer::Options& options) {
  s.set_payload_max_length(options.max_body_bytes);
  s.set_tcp_nodelay(true);
  s.set_keep_alive_max_count(1000000);
  // Only advertised (Keep-Alive: timeout=N); the connection loop enforces idle_timeout itself.
  s.set_keep_alive_timeout(
      std::max<time_t>(1, std::chrono::ceil<std::chrono::seconds>(options.idle_timeout).count()));
  s.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options.header_timeout));
  s.set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options.body_timeout));
  // SO_REUSEADDR only: a restarted server binds over its old connections' TIME_WAIT. Not
  // cpp-httplib's default SO_REUSEPORT, with which a second server starts on a port another
  // process listens on and the kernel splits the trainer's calls between the two.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
}

void answer_refusals(WtHttpServer& s) {
  // Refusals gate() decided are answered here, before httplib reads the body.
  s.set_pre_routing_handler([](const httplib::Request&, httplib::Response& res) {
    Connection* c = current;
    if (!c || !c->refuse_status) return httplib::Server::HandlerResponse::Unhandled;
    reply_error(res, c->refuse_status, c->refuse_detail);
    return httplib::Server::HandlerResponse::Handled;
  });
  // "Expect: 100-continue": a refused request gets its answer instead of 100, and no body comes.
  s.set_expect_100_continue_handler([](const httplib::Request&, httplib::Response& res) {
    Connection* c = current;
    if (!c || !c->refuse_status) return 100;
    reply_error(res, c->refuse_status, c->refuse_detail);
    // httplib writes this answer without computing its length.
    res.set_header("Content-Length", std::to_string(res.body.size()));
    return c->refuse_status;
  });
}

// The detail of an error httplib itself answered (a route missing, a malformed request, ...).
std::string default_detail(int status, const std::string& path) {
  switch (status) {
    case 400:
      return "malformed HTTP request";
    case 404:
      return fmt::format("no route {}", path);
    case 413:
      return "request body too large";
    case 414:
      return "request line too long";
    case 415:
      return "unsupported Content-Encoding";
    case 416:
      return "invalid Range header";
    default:
      return fmt::format("HTTP {}", status);
  }
}

void answer_errors(WtHttpServer& s, const HttpServer::Options& options) {
  // Every error answer carries a detail, httplib's own (malformed request, cut connection) too.
  s.set_error_handler(httplib::Server::HandlerWithResponse(
      [opts = options](const httplib::Request& req, httplib::Response& res) {
        try {
          Connection* c = current;
          // Cut, or answered before the request's framing was known (see the connection loop).
          if (c && (c->cut != Cut::none || !c->in_body) &&
              req.get_header_value("Connection") != "close")
            res.set_header("Connection", "close");
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          if (c && c->cut == Cut::timeout) {
            reply_error(res, 408,
                        c->in_body ? fmt::format("request body not received within {} ({} bytes)",
                                                 seconds(c->body_allowance), c->body_length)
                                   : fmt::format("request headers not received within {}",
                                                 seconds(opts.header_timeout)));
          } else if (c && c->cut == Cut::too_large) {
            reply_error(
                res, 431,
                fmt::format("request line and headers exceed {} bytes", opts.max_header_bytes));
          } else if (res.status == 400 && c && c->in_body && c->body_taken < c->body_length) {
            reply_error(res, 400,
                        fmt::format("request body incomplete: {} of {} bytes arrived",
                                    c->body_taken, c->body_length));
          } else {
            reply_error(res, res.status, default_detail(res.status, req.path));
          }
          // Handled: httplib then sets the Content-Length (it applies ranges too, but gate() clears
          // them, except after a bad Range header: that answer gets its length here).
          if (req.ranges.empty()) return httplib::Server::HandlerResponse::Handled;
          res.set_header("Content-Length", std::to_string(res.body.size()));
        } catch (...) {
        }
        return httplib::Server::HandlerResponse::Unhandled;
      }));
  // Nothing escapes as an empty 500.
  s.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        logger()->error("{} {}: {}", req.method, req.path, what);
        try {
          reply_error(res, 500, what);
        } catch (...) {
          res.status = 500;
          res.set_content(R"({"detail":"internal error"})", "application/json");
        }
      });
}

// Request bodies: the one expected JSON object, or a body with at most one optional string field.
class Bodies {
 public:
  explicit Bodies(JsonLimits limits) : limits_(limits) {}
  // Parses a request body into its one expected object; false (answered) when unusable.
  bool object(std::string& text, httplib::Response& res, nlohmann::json& out) const {
    try {
      out = parse_json(text, limits_);
    } catch (const JsonError& e) {
      reply_error(res, 400, invalid_json_detail(e.what()));
      return false;
    }
    std::string().swap(text);  // the text is no longer needed: free it before any work
    if (!out.is_object()) {
      reply_error(res, 400, "Request body must be a JSON object");
      return false;
    }
    return true;
  }
  // Reads and parses the body; false (answered) when unusable.
  bool read_object(const httplib::ContentReader& reader, httplib::Response& res,
                   nlohmann::json& out) const {
    std::string text;
    return read_body(reader, res, text) && object(text, res, out);
  }
  // A body that is absent, or an object with at most the one optional string field `name` (null
  // counts as absent): false (answered) when it is anything else.
  bool optional_string(const httplib::ContentReader& reader, httplib::Response& res,
                       const char* name, std::optional<std::string>& out) const {
    std::string text;
    if (!read_body(reader, res, text)) return false;
    if (text.empty()) return true;
    nlohmann::json body;
    if (!object(text, res, body)) return false;
    for (auto it = body.begin(); it != body.end(); ++it)
      if (it.key() != name) {
        reply_error(res, 400, fmt::format("unknown field '{}' in request body", it.key()));
        return false;
      }
    if (body.contains(name) && !body[name].is_null()) {
      if (!body[name].is_string()) {
        reply_error(res, 400, fmt::format("field '{}' must be a string", name));
        return false;
      }
      out = body[name].get<std::string>();
    }
    return true;
  }

 private:
  JsonLimits limits_;
};

void post(WtHttpServer& s, const std::string& path, httplib::Server::HandlerWithContentReader h) {
  s.known("POST", path);
  s.Post(path, std::move(h));
}
void get(WtHttpServer& s, const std::string& path, httplib::Server::Handler h) {
  s.known("GET", path);
  s.Get(path, std::move(h));
}

// vLLM's update session (init, start, update, finish), wt's end, and the version setter.
// `updating` counts the update calls inside the receiver now (their bodies read): /health says it.
void route_session(WtHttpServer& s, WeightRoutes* r, const Bodies& bodies,
                   const std::shared_ptr<std::atomic<int>>& updating) {
  post(s, "/init_weight_transfer_engine",
       [r, bodies](const httplib::Request&, httplib::Response& res,
                   const httplib::ContentReader& reader) {
         nlohmann::json body;
         if (!bodies.read_object(reader, res, body)) return;
         auto it = body.find("init_info");
         if (it == body.end()) return reply_error(res, 400, "Missing 'init_info' in request body");
         nlohmann::json info = std::move(*it);  // moved out of the body, not copied
         body = nullptr;
         guarded(res, "/init_weight_transfer_engine", [&] {
           r->init_weight_transfer_engine(std::move(info));
           reply(res, 200, {{"message", "Weight transfer initialized"}});
         });
       });
  post(s, "/start_weight_update",
       [r](const httplib::Request&, httplib::Response& res, const httplib::ContentReader& reader) {
         // The body is ignored: drain it without keeping it.
         if (!receive_body(reader, res, [](const char*, std::size_t) { return true; })) return;
         guarded(res, "/start_weight_update", [&] {
           r->start_weight_update();
           reply(res, 200, {{"message", "Weight update started"}});
         });
       });
  post(s, "/update_weights",
       [r, bodies, updating](const httplib::Request&, httplib::Response& res,
                             const httplib::ContentReader& reader) {
         nlohmann::json body;
         if (!bodies.read_object(reader, res, body)) return;
         auto it = body.find("update_info");
         if (it == body.end())
           return reply_error(res, 400, "Missing 'update_info' in request body");
         nlohmann::json info = std::move(*it);  // moved out of the body, not copied
         body = nullptr;
         struct Counted {
           std::atomic<int>& n;
           explicit Counted(std::atomic<int>& c) : n(c) { ++n; }
           ~Counted() { --n; }
         } counted(*updating);
         guarded(res, "/update_weights", [&] {
           r->update_weights(std::move(info));
           reply(res, 200, {{"message", "Weights updated"}});
         });
       });
  post(s, "/finish_weight_update",
       [r, bodies](const httplib::Request&, httplib::Response& res,
                   const httplib::ContentReader& reader) {
         std::optional<std::string> version;
         if (!bodies.optional_string(reader, res, "weight_version", version)) return;
         guarded(res, "/finish_weight_update", [&] {
           r->finish_weight_update(version);
           reply(res, 200, {{"message", "Weight update finished"}});
         });
       });
  // wt's own: ends the current update after a trainer-side failure (see Client::end_weight_update).
  post(s, "/end_weight_update",
       [r, bodies](const httplib::Request&, httplib::Response& res,
                   const httplib::ContentReader& reader) {
         std::optional<std::string> reason;
         if (!bodies.optional_string(reader, res, "reason", reason)) return;
         guarded(res, "/end_weight_update", [&] {
           r->end_weight_update(reason.value_or(""));
           reply(res, 200, {{"message", "Weight update ended"}});
         });
       });
  post(s, "/update_weight_version",
       [r, bodies](const httplib::Request&, httplib::Response& res,
                   const httplib::ContentReader& reader) {
         nlohmann::json body;
         if (!bodies.read_object(reader, res, body)) return;
         if (!body.contains("new_version") || !body["new_version"].is_string())
           return reply_error(res, 400, "field 'new_version' must be a string");
         guarded(res, "/update_weight_version", [&] {
           if (r->session_active()) throw Error(WT_ERR_STATE, "a weight update is active");
           r->set_weight_version(body["new_version"].get<std::string>());
           reply(res, 200, {{"success", true}, {"new_version", body["new_version"]}});
         });
       });
}

// The read-only routes.
void route_queries(WtHttpServer& s, WeightRoutes* r,
                   const std::shared_ptr<const std::atomic<int>>& updating) {
  get(s, "/weight_info", [r](const httplib::Request&, httplib::Response& res) {
    auto v = r->weight_version();
    reply(res, 200, {{"weight_version", v ? nlohmann::json(*v) : nlohmann::json(nullptr)}});
  });
  get(s, "/get_world_size", [r](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, {{"world_size", r->world_size()}});
  });
  get(s, "/weight_checksums", [r](const httplib::Request&, httplib::Response& res) {
    guarded(res, "/weight_checksums", [&] {
      auto v = r->weight_version();
      const auto by_rank = r->checksums_by_rank();
      nlohmann::json answer = {
          {"algorithm", "xxh3-64"},
          {"weight_version", v ? nlohmann::json(*v) : nlohmann::json(nullptr)}};
      if (by_rank.size() == 1) answer["checksums"] = by_rank[0];
      nlohmann::json& ranks = answer["ranks"] = nlohmann::json::array();
      for (std::size_t k = 0; k < by_rank.size(); ++k)
        ranks.push_back({{"rank", k}, {"checksums", by_rank[k]}});
      reply(res, 200, answer);
    });
  });
  get(s, "/health", [r, updating](const httplib::Request&, httplib::Response& res) {
    reply(res, 200,
          {{"status", "ok"},
           {"backend", r->backend()},
           {"update_active", r->session_active()},
           {"updates_in_progress", updating->load()}});
  });
}

}  // namespace

struct HttpServer::Impl {
  explicit Impl(const Options& o) : server(o) {}
  std::unique_ptr<ReceiverGroup> one;  // a single receiver's group of one
  WtHttpServer server;
  std::thread thread;
};

HttpServer::HttpServer(Receiver& receiver, Options options) : options_(std::move(options)) {
  impl_ = std::make_unique<Impl>(options_);
  impl_->one = std::make_unique<ReceiverGroup>(receiver);
  route(*impl_->one);
}

HttpServer::HttpServer(WeightRoutes& routes, Options options) : options_(std::move(options)) {
  impl_ = std::make_unique<Impl>(options_);
  route(routes);
}

void HttpServer::route(WeightRoutes& receiver) {
  auto& s = impl_->server;
  JsonLimits limits;
  limits.max_depth = options_.max_json_depth;
  limits.max_values = options_.max_json_values;
  apply_limits(s, options_);
  answer_refusals(s);
  answer_errors(s, options_);
  auto updating = std::make_shared<std::atomic<int>>(0);
  route_session(s, &receiver, Bodies(limits), updating);
  route_queries(s, &receiver, updating);
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  auto& s = impl_->server;
  s.reset_stop();
  port_ = options_.port == 0 ? s.bind_to_any_port(options_.host)
                             : (s.bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port_ <= 0)
    throw Error(WT_ERR_SYSTEM,
                fmt::format("cannot listen on {}:{} (in use, or not an address of this host)",
                            options_.host, options_.port));
  s.widen_backlog();
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
  // stop() is a no-op until the accept loop runs, so do not return before it does.
  while (!impl_->server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void HttpServer::stop() {
  // Connections waiting on their clients end now; the accept loop then joins the pool, which
  // waits only for handlers already running.
  impl_->server.begin_stop();
  impl_->server.stop();
  if (impl_->thread.joinable() && impl_->thread.get_id() != std::this_thread::get_id())
    impl_->thread.join();
}

std::string HttpServer::url() const {
  return fmt::format("http://{}:{}", options_.host, port_);
}

}  // namespace wt
