// The HTTP control plane. wt serve must accept requests shaped exactly as vLLM's Python client
// sends them (requests.post(url, json=...) / json=None) and refuse what vLLM refuses; the HTTP
// client's requests must pass a double that checks vLLM's paths and field names strictly.
#include <wt/services/http_client.hpp>
#include <wt/services/http_server.hpp>
#include <wt/services/receiver.hpp>
#include <wt/wt.hpp>

#include "support/model.hpp"
#include "support/recording_client.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <atomic>

#include <thread>

using nlohmann::json;
using ::testing::HasSubstr;

namespace wt {
namespace {

// A running wt serve equivalent in this process.
struct Serve {
  explicit Serve(HttpServer::Options o = {}) : server(receiver, o) { server.start(); }
  Receiver receiver{"ipc"};
  HttpServer server;
  httplib::Client raw() { return httplib::Client(server.url()); }
};

// What python-requests sends for post(url, json=body): compact JSON, application/json.
httplib::Result post_json(httplib::Client& c, const std::string& path, const json& body) {
  return c.Post(path, body.dump(), "application/json");
}

TEST(Serve, AcceptsVllmShapedRequestsForAWholeRound) {
  Serve s;
  auto c = s.raw();
  // A real update payload from the ipc trainer, recorded on its way to this server.
  test::VectorSource source;
  test::fill_model(source, 2);
  HttpClient http(s.server.url());
  test::RecordingClient recorder(&http);
  auto engine =
      trainer_init(InitInfo::from_object({{"backend", "ipc"}, {"rank", 0}}), recorder, &source);
  SendOptions opts;
  opts.weight_version = "step-1";
  engine->send_weights(opts);
  json update = json::parse(recorder.calls()[2].payload);

  auto r = post_json(c, "/init_weight_transfer_engine", {{"init_info", {{"packed", false}}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body), json({{"message", "Weight transfer initialized"}}));
  r = c.Post("/start_weight_update");  // json=None: no body, no content type
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["message"], "Weight update started");
  r = post_json(c, "/update_weights", {{"update_info", update}});
  // the worker was re-initialised, so the trainer's (already unlinked) segments are gone
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_THAT(r->body, HasSubstr("does not exist"));
  // A refused update call is over: /health counts none in progress.
  r = c.Get("/health");
  EXPECT_EQ(json::parse(r->body)["updates_in_progress"], 0) << r->body;

  // The trainer's own round over HTTP went through, and the server answers vLLM's GETs.
  r = c.Get("/weight_info");
  EXPECT_EQ(json::parse(r->body), json({{"weight_version", "step-1"}}));
  r = c.Get("/get_world_size?include_dp=true");
  EXPECT_EQ(json::parse(r->body), json({{"world_size", 1}}));
  r = c.Post("/start_weight_update");
  r = post_json(c, "/update_weights",
                {{"update_info",
                  {{"names", json::array()},
                   {"dtype_names", json::array()},
                   {"shapes", json::array()},
                   {"ipc_handles", json::array()}}}});
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["message"], "Weights updated");
  r = post_json(c, "/finish_weight_update", {{"weight_version", "step-2"}});
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["message"], "Weight update finished");
  r = c.Post("/start_weight_update");
  r = c.Post("/finish_weight_update");  // no body: no version
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(s.receiver.weight_version(), "step-2");
}

TEST(Serve, APortAnotherServerListensOnIsRefusedNotShared) {
  Serve first;
  HttpServer::Options o;
  o.port = first.server.port();
  Receiver second_receiver("ipc");
  HttpServer second(second_receiver, o);
  try {
    second.start();
    FAIL() << "a second server started on port " << o.port << " beside the first";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_SYSTEM);
    EXPECT_EQ(std::string(e.what()), "cannot listen on 127.0.0.1:" + std::to_string(o.port) +
                                         " (in use, or not an address of this host)");
  }
  // The first one still answers, alone.
  auto c = first.raw();
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(Serve, RefusesWhatVllmRefuses) {
  Serve s;
  auto c = s.raw();
  auto r = c.Post("/init_weight_transfer_engine", "{not json", "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["detail"], "Invalid JSON format");
  r = post_json(c, "/init_weight_transfer_engine", {{"info", {}}});
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["detail"], "Missing 'init_info' in request body");
  r = post_json(c, "/init_weight_transfer_engine",
                {{"init_info", {{"packed", false}, {"bogus", 1}}}});
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("unknown field 'bogus'"));

  ASSERT_EQ(
      post_json(c, "/init_weight_transfer_engine", {{"init_info", {{"packed", false}}}})->status,
      200);
  r = post_json(c, "/update_weights", {{"update_info", json::object()}});
  EXPECT_EQ(r->status, 409) << "update before start";
  EXPECT_THAT(r->body, HasSubstr("start_weight_update must be called before update_weights"));
  ASSERT_EQ(c.Post("/start_weight_update")->status, 200);
  r = c.Post("/start_weight_update");
  EXPECT_EQ(r->status, 409);
  EXPECT_THAT(r->body, HasSubstr("already active"));
  r = post_json(c, "/update_weights", {{"update", json::object()}});
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["detail"], "Missing 'update_info' in request body");
  // vLLM >= 0.28 rejects 'packed' inside update_info; so does wt, and the session ends.
  r = post_json(c, "/update_weights",
                {{"update_info",
                  {{"names", json::array()},
                   {"dtype_names", json::array()},
                   {"shapes", json::array()},
                   {"ipc_handles", json::array()},
                   {"packed", true}}}});
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("unknown field 'packed'"));
  EXPECT_FALSE(s.receiver.session_active());
  r = c.Post("/finish_weight_update");
  EXPECT_EQ(r->status, 409);
  r = post_json(c, "/finish_weight_update", {{"weight_version", 3}});
  EXPECT_EQ(r->status, 400);
}

TEST(Serve, BearerTokenGuardsEveryRoute) {
  HttpServer::Options o;
  o.bearer_token = "s3cret";
  Serve s(o);
  auto c = s.raw();
  auto r = c.Get("/weight_info");
  EXPECT_EQ(r->status, 401);
  r = c.Post("/start_weight_update");
  EXPECT_EQ(r->status, 401);
  httplib::Headers h{{"Authorization", "Bearer s3cret"}};
  r = c.Get("/weight_info", h);
  EXPECT_EQ(r->status, 200);
  HttpClient::Options co;
  co.bearer_token = "s3cret";
  HttpClient good(s.server.url(), co);
  good.init_weight_transfer_engine(R"({"packed":false})");
  HttpClient bad(s.server.url());
  try {
    bad.start_weight_update();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_REMOTE);
    EXPECT_THAT(e.what(), HasSubstr("HTTP 401"));
  }
}

TEST(Serve, BodiesOverTheLimitAreRefused) {
  HttpServer::Options o;
  o.max_body_bytes = 1024;
  Serve s(o);
  auto c = s.raw();
  json big = {{"update_info", {{"names", std::vector<std::string>(200, "x.weight")}}}};
  auto r = post_json(c, "/update_weights", big);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
}

// ---- the client against a double that checks vLLM's wire strictly ----

struct VllmDouble {
  httplib::Server server;
  std::thread thread;
  int port = 0;
  std::vector<std::string> seen, problems;
  std::mutex mu;
  std::atomic<int> delay_ms{0};  // set by the test thread, read by the server's

  // Snapshots under the lock the handlers write with.
  std::vector<std::string> seen_now() {
    std::lock_guard<std::mutex> l(mu);
    return seen;
  }
  std::vector<std::string> problems_now() {
    std::lock_guard<std::mutex> l(mu);
    return problems;
  }

  VllmDouble() {
    auto expect_keys = [this](const httplib::Request& req, std::set<std::string> keys) {
      if (req.get_header_value("Content-Type") != "application/json")
        problems.push_back(req.path + ": content type");
      auto j = json::parse(req.body);
      std::set<std::string> got;
      for (auto it = j.begin(); it != j.end(); ++it) got.insert(it.key());
      if (got != keys) problems.push_back(req.path + ": keys " + j.dump());
    };
    auto handler = [this, expect_keys](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> l(mu);
      if (delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      seen.push_back(req.path + " " + req.body);
      if (req.path == "/init_weight_transfer_engine")
        expect_keys(req, {"init_info"});
      else if (req.path == "/update_weights")
        expect_keys(req, {"update_info"});
      else if (req.path == "/start_weight_update" && !req.body.empty())
        problems.push_back("start has a body");
      else if (req.path == "/finish_weight_update" && !req.body.empty())
        expect_keys(req, {"weight_version"});
      if (req.path == "/update_weights" && req.body.find("\"fail\"") != std::string::npos) {
        res.status = 400;
        res.set_content(R"({"detail":"Invalid update_info for IPCWeightTransferEngine"})",
                        "application/json");
        return;
      }
      res.set_content(R"({"message":"ok"})", "application/json");
    };
    for (const char* p : {"/init_weight_transfer_engine", "/start_weight_update", "/update_weights",
                          "/finish_weight_update"})
      server.Post(p, handler);
    port = server.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { server.listen_after_bind(); });
    while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~VllmDouble() {
    server.stop();
    thread.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port) + "/"; }
};

TEST(HttpClient, SendsVllmsExactPathsAndBodies) {
  VllmDouble d;
  HttpClient c(d.url());  // a trailing slash is stripped, as vLLM's client does
  c.init_weight_transfer_engine(R"({"packed":true})");
  c.start_weight_update();
  c.update_weights(R"({"names":["a"],"dtype_names":["bfloat16"],"shapes":[[2]]})");
  c.finish_weight_update(std::string("step-42"));
  c.finish_weight_update(std::nullopt);
  EXPECT_TRUE(d.problems_now().empty()) << ::testing::PrintToString(d.problems_now());
  EXPECT_EQ(
      d.seen_now(),
      (std::vector<std::string>{
          R"(/init_weight_transfer_engine {"init_info":{"packed":true}})", "/start_weight_update ",
          R"(/update_weights {"update_info":{"names":["a"],"dtype_names":["bfloat16"],"shapes":[[2]]}})",
          R"(/finish_weight_update {"weight_version":"step-42"})", "/finish_weight_update "}));
}

TEST(HttpClient, ServerRefusalCarriesTheStatusAndDetail) {
  VllmDouble d;
  HttpClient c(d.url());
  try {
    c.update_weights(R"({"fail":true})");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_REMOTE);
    EXPECT_THAT(e.what(), HasSubstr("/update_weights answered HTTP 400: Invalid update_info"));
  }
}

TEST(HttpClient, DeadlineIsATimeoutNotAHang) {
  VllmDouble d;
  d.delay_ms = 1500;
  HttpClient::Options o;
  o.timeout = std::chrono::milliseconds(200);
  HttpClient c(d.url(), o);
  auto t0 = std::chrono::steady_clock::now();
  try {
    c.start_weight_update();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_TIMEOUT) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1400));
}

TEST(HttpClient, UnreachableServerIsNamed) {
  HttpClient c("http://127.0.0.1:1");
  try {
    c.start_weight_update();
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("POST http://127.0.0.1:1/start_weight_update failed: the "
                                    "receiver at http://127.0.0.1:1 refused the connection"));
  }
  EXPECT_THROW(HttpClient("https://x"), Error);
}

// A receiver that dies mid-call: a listener that takes the request and closes without answering.
TEST(HttpClient, AReceiverThatClosesTheConnectionIsReportedAsGoneNotAsADeadline) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  std::thread closer([fd] {
    int c = ::accept(fd, nullptr, nullptr);
    char buf[4096];
    [[maybe_unused]] ssize_t n = ::read(c, buf, sizeof buf);
    ::close(c);
  });
  HttpClient::Options o;
  o.timeout = std::chrono::seconds(30);
  HttpClient c(url, o);
  auto t0 = std::chrono::steady_clock::now();
  try {
    c.update_weights("{}");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_REMOTE) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("failed: the receiver at " + url + " closed the connection"));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("Read")));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  closer.join();
  ::close(fd);
}

TEST(HttpClient, ASilentReceiverIsReportedWithTheDeadlineInSeconds) {
  VllmDouble d;
  d.delay_ms = 1500;
  HttpClient::Options o;
  o.timeout = std::chrono::milliseconds(250);
  HttpClient c(d.url(), o);
  try {
    c.start_weight_update();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_TIMEOUT) << e.what();
    std::string base = d.url();
    base.pop_back();  // the client strips the trailing slash
    EXPECT_THAT(e.what(), HasSubstr("the receiver at " + base + " did not answer within 0.25 s"));
  }
}

// A server without wt's /end_weight_update route (stock vLLM): the client ends the session the old
// way, with an update the server must refuse.
TEST(HttpClient, EndingAnUpdateWithoutTheRouteFallsBackToARefusedUpdate) {
  VllmDouble d;
  HttpClient c(d.url());
  c.end_weight_update("the trainer failed");
  c.end_weight_update("again");
  EXPECT_EQ(d.seen_now(),
            (std::vector<std::string>{
                R"(/update_weights {"update_info":{"wt_end_weight_update":"the trainer failed"}})",
                R"(/update_weights {"update_info":{"wt_end_weight_update":"again"}})"}));
}

TEST(Serve, EndWeightUpdateEndsTheSessionAndKeepsTheWeights) {
  Serve s;
  HttpClient c(s.server.url());
  c.init_weight_transfer_engine(R"({"packed":false})");
  c.start_weight_update();
  EXPECT_TRUE(s.receiver.session_active());
  c.end_weight_update("trainer rank 0 failed");
  EXPECT_FALSE(s.receiver.session_active());
  c.end_weight_update("nothing active: not an error");
  c.start_weight_update();  // accepted again
  auto raw = s.raw();
  auto r = post_json(raw, "/end_weight_update", {{"why", "x"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, HasSubstr("unknown field 'why'"));
}

TEST(HttpClient, AbortCallsInterruptsABlockedCall) {
  VllmDouble d;
  d.delay_ms = 3000;
  HttpClient c(d.url());
  auto t0 = std::chrono::steady_clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    c.abort_calls();
  });
  try {
    c.start_weight_update();
    ADD_FAILURE() << "the call was not interrupted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_ABORTED) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2500));
  aborter.join();
}

}  // namespace
}  // namespace wt
