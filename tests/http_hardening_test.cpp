// wt serve's HTTP control plane against hostile clients: bodies that crash or balloon a JSON
// parser, clients that send slowly or announce bodies they never send, and token guessing.
// Each test runs an HttpServer in this process over an ipc Receiver and talks raw HTTP to it.
#include <wt/services/http_server.hpp>
#include <wt/services/receiver.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace wt {
namespace {

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Serve {
  explicit Serve(HttpServer::Options o = {}) : server(receiver, o) { server.start(); }
  Receiver receiver{"ipc"};
  HttpServer server;
  httplib::Client client() {
    httplib::Client c(server.url());
    c.set_read_timeout(10, 0);
    return c;
  }
};

// Options with deadlines short enough for a test.
HttpServer::Options quick() {
  HttpServer::Options o;
  o.header_timeout = 2s;
  o.idle_timeout = 2s;
  o.body_timeout = 2s;
  o.body_min_bytes_per_second = 1 << 20;
  return o;
}

// A raw client connection.
struct Raw {
  explicit Raw(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) ADD_FAILURE() << "connect";
    opened = Clock::now();
  }
  ~Raw() { ::close(fd); }
  Raw(const Raw&) = delete;

  bool send(const std::string& s) {
    std::size_t done = 0;
    while (done < s.size()) {
      ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }
  // Everything the server sends until it closes or `limit` passes; `closed` tells which.
  std::string read_until_close(std::chrono::milliseconds limit) {
    std::string out;
    auto until = Clock::now() + limit;
    closed = false;
    while (Clock::now() < until) {
      pollfd p{fd, POLLIN, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 1))) <= 0) continue;
      char buf[65536];
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) {
        closed = true;
        closed_after = since(opened);
        break;
      }
      out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
  }
  // One answer (status line, headers, Content-Length body), without waiting for a close.
  std::string read_answer(std::chrono::milliseconds limit) {
    std::string out;
    auto until = Clock::now() + limit;
    for (;;) {
      auto end = out.find("\r\n\r\n");
      if (end != std::string::npos) {
        auto cl = out.find("Content-Length: ");
        std::size_t n = cl == std::string::npos ? 0 : std::stoul(out.substr(cl + 16));
        if (out.size() >= end + 4 + n) return out;
      }
      if (Clock::now() >= until) return out;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[65536];
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return out;
      out.append(buf, static_cast<std::size_t>(n));
    }
  }

  int fd = -1;
  Clock::time_point opened;
  bool closed = false;
  double closed_after = -1;
};

int status_of(const std::string& answer) {
  if (answer.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::stoi(answer.substr(9, 3));
}
json body_of(const std::string& answer) {
  auto end = answer.find("\r\n\r\n");
  if (end == std::string::npos) return nullptr;
  return json::parse(answer.substr(end + 4), nullptr, false);
}
std::string post_head(const std::string& path, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\n" + extra + "\r\n";
}

// ---- 1, 2: bodies that used to crash the server or escape as an empty 500 ----

TEST(HttpHardening, DeeplyNestedJsonIsRefusedNotACrash) {
  Serve s;
  auto c = s.client();
  for (std::size_t levels : {65'000u, 300'000u}) {
    std::string deep = std::string(levels, '[') + std::string(levels, ']');
    auto r = c.Post("/init_weight_transfer_engine", R"({"init_info":{"x":)" + deep + "}}",
                    "application/json");
    ASSERT_TRUE(r) << levels;
    EXPECT_EQ(r->status, 400);
    EXPECT_EQ(json::parse(r->body)["detail"],
              "Invalid JSON format: JSON nested deeper than 64 levels");
  }
  ASSERT_EQ(
      c.Post("/init_weight_transfer_engine", R"({"init_info":{}})", "application/json")->status,
      200);
  ASSERT_EQ(c.Post("/start_weight_update")->status, 200);
  std::string deep = std::string(65'000, '[') + std::string(65'000, ']');
  auto r =
      c.Post("/update_weights", R"({"update_info":{"names":)" + deep + "}}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["detail"],
            "Invalid JSON format: JSON nested deeper than 64 levels");
  EXPECT_EQ(c.Get("/health")->status, 200);
  // 64 levels are still fine (the receiver then refuses the field, not the JSON).
  std::string ok = std::string(63, '[') + std::string(63, ']');
  r = c.Post("/init_weight_transfer_engine", R"({"init_info":)" + ok + "}", "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("init_info must be a JSON object"));
}

TEST(HttpHardening, NumberOverflowIsA400WithADetail) {
  Serve s;
  auto c = s.client();
  auto r =
      c.Post("/init_weight_transfer_engine", R"({"init_info":{"x":1e999}})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  std::string detail = json::parse(r->body)["detail"];
  EXPECT_THAT(detail, StartsWith("Invalid JSON format: "));
  EXPECT_THAT(detail, HasSubstr("1e999"));
  r = c.Post("/update_weight_version", R"({"new_version":"a","n":-1e999})", "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("Invalid JSON format: "));
}

TEST(HttpHardening, TooManyJsonValuesAreRefused) {
  auto o = quick();
  o.max_json_values = 1000;
  Serve s(o);
  auto c = s.client();
  json many = json::array();
  for (int i = 0; i < 2000; ++i) many.push_back(i);
  auto r = c.Post("/init_weight_transfer_engine", json{{"init_info", {{"x", many}}}}.dump(),
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["detail"],
            "Invalid JSON format: JSON holds more than 1000 values");
}

TEST(HttpHardening, EveryErrorAnswerCarriesAJsonDetail) {
  Serve s(quick());
  struct Case {
    std::string request;
    int status;
    std::string detail;
  };
  std::vector<Case> cases = {
      {"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", 404, "no route /nowhere"},
      {"DELETE /health HTTP/1.1\r\nHost: x\r\n\r\n", 405, "/health does not accept DELETE"},
      {"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n", 200, ""},
      {"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n", 400, "malformed HTTP request"},
      {post_head("/update_weights", "Content-Length: 12x\r\n"), 400, "invalid Content-Length"},
      {post_head("/update_weights", "Content-Length: 3\r\nContent-Length: 4\r\n"), 400,
       "invalid Content-Length"},
      {post_head("/update_weights", "Transfer-Encoding: chunked\r\n") + "2\r\n{}\r\n0\r\n\r\n", 411,
       "Transfer-Encoding is not accepted"},
      {post_head("/update_weights", "Content-Length: 2\r\nContent-Encoding: gzip\r\n") + "{}", 415,
       "Content-Encoding 'gzip' is not accepted"},
      {post_head("/update_weights",
                 "Content-Length: 2\r\nContent-Type: multipart/form-data; boundary=x\r\n") +
           "{}",
       415, "multipart"},
      {"GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n", 414,
       "request line too long"},
  };
  for (const auto& k : cases) {
    Raw raw(s.server.port());
    raw.send(k.request);
    std::string answer = raw.read_answer(3s);
    EXPECT_EQ(status_of(answer), k.status) << k.request.substr(0, 80) << "\n" << answer;
    if (k.status == 200) continue;
    json b = body_of(answer);
    ASSERT_TRUE(b.is_object()) << answer;
    EXPECT_THAT(b["detail"].get<std::string>(), HasSubstr(k.detail)) << answer;
    EXPECT_THAT(answer, HasSubstr("Content-Type: application/json"));
  }
}

TEST(HttpHardening, AnExceptionEscapingARouteIsA500WithADetail) {
  // With no body limit, a body of 2^63 - 1 bytes passes the gate, and the string it would be
  // read into throws std::length_error (over its max_size), which no route catches.
  auto o = quick();
  o.max_body_bytes = SIZE_MAX;
  Serve s(o);
  Raw raw(s.server.port());
  raw.send(post_head("/update_weights", "Content-Length: 9223372036854775807\r\n"));
  std::string answer = raw.read_answer(3s);
  EXPECT_EQ(status_of(answer), 500) << answer;
  json b = body_of(answer);
  ASSERT_TRUE(b.is_object()) << answer;
  EXPECT_FALSE(b["detail"].get<std::string>().empty());
  EXPECT_EQ(s.client().Get("/health")->status, 200);
}

// ---- 3: slow and lying clients ----

// Sends `request` a byte at a time every `gap` until the server closes; the server's answer.
void dribble(Raw& raw, const std::string& request, std::chrono::milliseconds gap,
             std::chrono::milliseconds limit) {
  auto until = Clock::now() + limit;
  for (std::size_t i = 0; i < request.size() && Clock::now() < until; ++i) {
    if (!raw.send(request.substr(i, 1))) break;
    pollfd p{raw.fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(gap.count())) > 0) break;  // an answer or a close
  }
}

TEST(HttpHardening, SlowHeadersAreCutAtTheDeadlineAndHealthAnswersMeanwhile) {
  auto o = quick();
  o.threads = 4;
  Serve s(o);
  // Fewer stalled clients than threads: /health answers at once.
  {
    std::vector<std::unique_ptr<Raw>> slow;
    for (int i = 0; i < 3; ++i) {
      slow.push_back(std::make_unique<Raw>(s.server.port()));
      slow.back()->send("GET /hea");
    }
    std::this_thread::sleep_for(200ms);
    auto t0 = Clock::now();
    auto r = s.client().Get("/health");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_LT(since(t0), 0.5);
  }
  // Twice as many as threads, each sending a byte every 300 ms, then /health. A connection
  // dawdling over its headers gives its thread up once it waited 100 ms while another connection
  // waits for one: the first four always do (the last four are queued behind them), and of the
  // last four at least the one whose thread /health takes. Once nothing waits, the others may keep
  // their thread until the 2 s header deadline cuts them. /health never waits for that deadline.
  std::vector<std::unique_ptr<Raw>> slow;
  for (int i = 0; i < 8; ++i) slow.push_back(std::make_unique<Raw>(s.server.port()));
  std::vector<std::thread> senders;
  for (auto& raw : slow)
    senders.emplace_back([&raw] {
      dribble(*raw, "GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(100, 'p'), 300ms,
              10s);
    });
  std::this_thread::sleep_for(100ms);
  auto t0 = Clock::now();
  auto r = s.client().Get("/health");
  double health_took = since(t0);
  for (auto& t : senders) t.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(health_took, 1.9);  // before the header deadline of the connections ahead of it
  int gave_way = 0;
  for (auto& raw : slow) {
    std::string answer = raw->read_until_close(3s);
    EXPECT_TRUE(raw->closed);
    EXPECT_LT(raw->closed_after, 3.5);
    EXPECT_EQ(status_of(answer), 408) << answer;
    auto detail = body_of(answer)["detail"].get<std::string>();
    if (detail.find("request headers not received in time: the server is busy") == 0)
      ++gave_way;
    else
      EXPECT_EQ(detail, "request headers not received within 2 s");
  }
  EXPECT_GE(gave_way, 5);
}

TEST(HttpHardening, AByteEverySecondDoesNotExtendTheDeadline) {
  Serve s(quick());
  Raw raw(s.server.port());
  dribble(raw, "POST /start_weight_update HTTP/1.1\r\nHost: x\r\n\r\n", 1000ms, 10s);
  std::string answer = raw.read_until_close(3s);
  EXPECT_TRUE(raw.closed);
  EXPECT_LT(raw.closed_after, 3.5);
  EXPECT_EQ(status_of(answer), 408) << answer;
  // A connection that sends nothing at all is closed silently.
  Raw idle(s.server.port());
  EXPECT_EQ(idle.read_until_close(4s), "");
  EXPECT_TRUE(idle.closed);
  EXPECT_LT(idle.closed_after, 3.5);
}

TEST(HttpHardening, HugeContentLengthIsRefusedBeforeAnyOfTheBodyIsRead) {
  Serve s(quick());
  for (std::string extra : {"", "Expect: 100-continue\r\n"}) {
    Raw raw(s.server.port());
    // Nothing of the body is ever sent: an answer proves the server did not wait for it.
    raw.send(post_head("/update_weights",
                       "Content-Type: application/json\r\n"
                       "Content-Length: 1000000000000\r\n" +
                           extra));
    auto t0 = Clock::now();
    std::string answer = raw.read_answer(5s);
    EXPECT_LT(since(t0), 0.5);
    EXPECT_EQ(status_of(answer), 413) << answer;
    EXPECT_EQ(body_of(answer)["detail"],
              "request body of 1000000000000 bytes exceeds the limit of 268435456 bytes");
    EXPECT_THAT(answer, HasSubstr("Connection: close"));
    raw.read_until_close(3s);
    EXPECT_TRUE(raw.closed);
  }
  // The limit is the option's, exactly.
  auto o = quick();
  o.max_body_bytes = 100;
  Serve small(o);
  auto c = small.client();
  EXPECT_EQ(c.Post("/update_weights", std::string(101, ' '), "application/json")->status, 413);
  EXPECT_EQ(c.Post("/update_weights", std::string(100, ' '), "application/json")->status, 400);
}

TEST(HttpHardening, PostWithoutContentLengthHasNoBody) {
  Serve s(quick());
  // The connection stays open: the answer must not wait for an EOF that marks a body's end.
  Raw raw(s.server.port());
  raw.send(post_head("/start_weight_update"));
  auto t0 = Clock::now();
  std::string answer = raw.read_answer(3s);
  EXPECT_LT(since(t0), 0.5);
  EXPECT_EQ(status_of(answer), 409) << answer;  // not initialised: the body was taken as empty
  EXPECT_THAT(answer, HasSubstr("not initialised"));
  raw.send(post_head("/init_weight_transfer_engine"));
  answer = raw.read_answer(3s);
  EXPECT_EQ(status_of(answer), 400) << answer;
  EXPECT_EQ(body_of(answer)["detail"], "Invalid JSON format");
  raw.send(post_head("/finish_weight_update"));
  answer = raw.read_answer(3s);
  EXPECT_EQ(status_of(answer), 409) << answer;  // a body-less finish is vLLM's json=None
}

TEST(HttpHardening, BodySentSlowerThanTheRateIsCut) {
  Serve s(quick());  // 2 s + size / 1 MiB/s
  Raw raw(s.server.port());
  raw.send(post_head("/update_weights", "Content-Length: 100\r\n"));
  auto t0 = Clock::now();
  dribble(raw, std::string(100, ' '), 100ms, 10s);
  std::string answer = raw.read_until_close(3s);
  EXPECT_TRUE(raw.closed);
  EXPECT_GT(since(t0), 1.8);
  EXPECT_LT(since(t0), 3.5);
  EXPECT_EQ(status_of(answer), 408) << answer;
  EXPECT_THAT(body_of(answer)["detail"].get<std::string>(),
              HasSubstr("request body not received within 2 s (100 bytes)"));
  // A body that stops short is cut the same way; one whose client goes away is a 400.
  Raw half(s.server.port());
  half.send(post_head("/init_weight_transfer_engine", "Content-Length: 50\r\n") + "{\"init");
  answer = half.read_until_close(4s);
  EXPECT_EQ(status_of(answer), 408) << answer;
  Raw gone(s.server.port());
  gone.send(post_head("/init_weight_transfer_engine", "Content-Length: 50\r\n") + "{\"init");
  ::shutdown(gone.fd, SHUT_WR);
  answer = gone.read_until_close(3s);
  EXPECT_EQ(status_of(answer), 400) << answer;
  EXPECT_THAT(answer, HasSubstr("request body incomplete: 6 of 50 bytes arrived"));
}

TEST(HttpHardening, AHealthyLargeBodyIsNotCut) {
  // 8 MiB at loopback speed is far inside 2 s + 8 s.
  Serve s(quick());
  auto c = s.client();
  c.set_read_timeout(60, 0);  // handling 8 MiB of JSON takes a while in a sanitizer build
  std::string pad(8 << 20, 'x');
  auto r =
      c.Post("/init_weight_transfer_engine",
             json{{"init_info", {{"packed", false}, {"pad", pad}}}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("unknown field 'pad'"));
}

TEST(HttpHardening, HeadersOverTheLimitAre431) {
  auto o = quick();
  o.max_header_bytes = 4096;
  Serve s(o);
  Raw raw(s.server.port());
  std::string head = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 100; ++i)
    head += "X-H" + std::to_string(i) + ": " + std::string(60, 'v') + "\r\n";
  raw.send(head + "\r\n");
  std::string answer = raw.read_until_close(3s);
  EXPECT_EQ(status_of(answer), 431) << answer;
  EXPECT_THAT(answer, HasSubstr("request line and headers exceed 4096 bytes"));
  // A request line that never ends is cut at the same bound, not grown without one.
  Raw line(s.server.port());
  line.send("GET /" + std::string(100'000, 'a'));
  answer = line.read_until_close(3s);
  EXPECT_EQ(status_of(answer), 431) << answer;
}

TEST(HttpHardening, KeepAliveAndPipelinedRequestsStillWork) {
  Serve s(quick());
  Raw raw(s.server.port());
  std::string get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  raw.send(get + get);  // pipelined: both are answered
  std::string first = raw.read_answer(3s);
  EXPECT_EQ(status_of(first), 200) << first;
  std::string rest = first.substr(first.find("\r\n\r\n") + 4);
  rest = rest.substr(rest.find('}') + 1);
  if (rest.find("\r\n\r\n") == std::string::npos) rest += raw.read_answer(3s);
  EXPECT_EQ(status_of(rest), 200) << rest;
  std::this_thread::sleep_for(1s);  // within idle_timeout
  raw.send(get);
  EXPECT_EQ(status_of(raw.read_answer(3s)), 200);
  // An idle kept-alive connection is closed after idle_timeout.
  raw.read_until_close(4s);
  EXPECT_TRUE(raw.closed);
  // "Expect: 100-continue" still works for an acceptable body.
  Raw cont(s.server.port());
  cont.send(
      post_head("/init_weight_transfer_engine", "Content-Length: 16\r\nExpect: 100-continue\r\n"));
  EXPECT_THAT(cont.read_answer(3s), StartsWith("HTTP/1.1 100 Continue"));
  cont.send(R"({"init_info":{}})");
  EXPECT_EQ(status_of(cont.read_answer(3s)), 200);
}

TEST(HttpHardening, StopDoesNotWaitForSlowClients) {
  auto o = quick();
  o.header_timeout = 60s;
  o.body_timeout = 60s;
  o.idle_timeout = 60s;
  auto s = std::make_unique<Serve>(o);
  int port = s->server.port();
  std::vector<std::unique_ptr<Raw>> conns;
  for (int i = 0; i < 3; ++i) {
    conns.push_back(std::make_unique<Raw>(port));
    conns.back()->send("GET /hea");  // in its headers
  }
  for (int i = 0; i < 3; ++i) {
    conns.push_back(std::make_unique<Raw>(port));
    conns.back()->send(post_head("/update_weights", "Content-Length: 1000\r\n") + "{");
  }
  conns.push_back(std::make_unique<Raw>(port));
  conns.back()->send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");  // then idle, kept alive
  EXPECT_EQ(status_of(conns.back()->read_answer(3s)), 200);
  std::this_thread::sleep_for(200ms);
  auto t0 = Clock::now();
  s->server.stop();
  EXPECT_LT(since(t0), 1.0);
  s.reset();
  for (auto& c : conns) {
    c->read_until_close(2s);
    EXPECT_TRUE(c->closed);
  }
}

// ---- 4: the bearer token ----

TEST(HttpHardening, BearerTokenIsCheckedBeforeTheBodyAndOnlyExactMatchesPass) {
  auto o = quick();
  o.bearer_token = "s3cret-token";
  Serve s(o);
  auto c = s.client();
  for (std::string auth :
       {"", "Bearer ", "Bearer s3cret-toke", "Bearer s3cret-token2", "Bearer S3cret-token",
        "bearer s3cret-token", "s3cret-token", "Bearer s3cret-tokeN"}) {
    httplib::Headers h;
    if (!auth.empty()) h.emplace("Authorization", auth);
    auto r = c.Get("/weight_info", h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << auth;
    EXPECT_EQ(json::parse(r->body)["detail"], "missing or wrong bearer token");
  }
  auto r = c.Get("/weight_info", {{"Authorization", "Bearer s3cret-token"}});
  EXPECT_EQ(r->status, 200);
  // Refused before any of a (never sent) body is awaited.
  Raw raw(s.server.port());
  raw.send(post_head("/update_weights", "Content-Length: 100000000\r\n"));
  auto t0 = Clock::now();
  std::string answer = raw.read_answer(3s);
  EXPECT_LT(since(t0), 0.5);
  EXPECT_EQ(status_of(answer), 401) << answer;
  // Unauthenticated clients cannot tell routes apart.
  raw.read_until_close(2s);
  Raw probe(s.server.port());
  probe.send("GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_of(probe.read_answer(3s)), 401);
}

// ---- 5: what one request may allocate ----

// nlohmann's callback parser scans a container's elements at the end of each object inside it, so
// an array of n objects cost n^2 / 2 steps: this 1.2 MB body of 400,000 "{}" took hours. wt's
// parse_json builds through a SAX handler instead: well under a second (the bound leaves room for
// sanitizer builds; the quadratic parse missed it by orders of magnitude).
TEST(HttpHardening, ArraysOfManyObjectsParseInLinearTime) {
  Serve s(quick());
  auto c = s.client();
  c.set_read_timeout(60, 0);
  std::string many = "[";
  for (int i = 0; i < 400'000; ++i) many += "{},";
  many += "{}]";
  auto t0 = Clock::now();
  auto r = c.Post("/init_weight_transfer_engine", R"({"init_info":{"x":)" + many + "}}",
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_LT(since(t0), 20.0);
}

}  // namespace
}  // namespace wt
