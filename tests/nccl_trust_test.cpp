// The nccl and sparse_nccl host path as an attacker and a failing peer see it, across real
// processes (`wt serve` receivers, wt_test_trainer): a stranger on the store's port during the
// rendezvous, a sender (this process, holding the session's secret) broadcasting more or fewer
// bytes than its update info promised or NaN in sparse values, a receiver (this process, holding
// its own rank key) that alters what it relays down Gloo's broadcast tree, a receiver stopped or
// killed inside a broadcast, a stranger racing the peers to the Gloo pair ports, a trainer that
// drifted from the model the receivers hold, 200 clients polling a receiver during rounds, and a
// group of one trainer and 64 receivers. Each prints the time from fault to report.
#include "broadcast_group.hpp"
#include "gloo_mesh.hpp"
#include "session_keys.hpp"
#include "sigpipe_guard.hpp"

#include <wt/services/http_client.hpp>

#include "subprocess.hpp"
#include "support/free_port.hpp"
#include "support/model.hpp"
#include "support/nccl_processes.hpp"

#include <gloo/types.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

using ::testing::HasSubstr;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace wt {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTransferS = 4;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

using test::Served;

Served serve(const std::string& backend = "nccl") {
  return test::serve_receiver(backend, kTransferS);
}

std::vector<std::string> trainer(const std::vector<Served*>& receivers, int port, int rounds,
                                 std::vector<std::string> extra = {}) {
  return test::nccl_trainer(receivers, port, rounds, kTransferS, std::move(extra));
}

// A connection to 127.0.0.1:port, or -1 when nothing takes it.
int dial_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

// A stranger who knows only the port hammers the store during the rendezvous with hellos it
// cannot sign and a SET of rank 1's address: the group forms with the real ranks, both receivers
// are byte exact, and the trainer's log names the connections it dropped.
TEST(NcclTrust, AStrangerOnTheStorePortCannotJoinAndTheGroupStillSyncs) {
  Served a = serve(), b = serve();
  const int port = test::free_port();
  std::atomic<bool> stop{false};
  std::atomic<int> attempts{0};
  std::thread attacker([&] {
    while (!stop) {
      const int fd = dial_loopback(port);
      if (fd >= 0) {
        ++attempts;
        std::string forged(48, 'x');  // a nonce and a made-up MAC, then a SET of key "1"
        forged += std::string(
            "\x01\x01\x00\x00\x00"
            "1\x04\x00\x00\x00"
            "evil",
            14);
        ::send(fd, forged.data(), forged.size(), MSG_NOSIGNAL);
        ::close(fd);
      }
      std::this_thread::sleep_for(2ms);
    }
  });
  cli::Child t(trainer({&a, &b}, port, 2));
  const int rc = t.wait();
  stop = true;
  attacker.join();
  ASSERT_EQ(rc, 0) << t.output() << a.process->output() << b.process->output();
  const auto expected = test::expected_after(2, 40, 64, 0);
  EXPECT_EQ(HttpClient(a.url).weight_checksums(), expected);
  EXPECT_EQ(HttpClient(b.url).weight_checksums(), expected);
  EXPECT_GT(attempts.load(), 0);
  std::cout << attempts.load() << " forged connections while the group formed\n" << t.output();
}

// This process plays the sender, holding the session's secret, and lies about sizes.
struct TestSender {
  plugins::SessionSecret secret = plugins::SessionSecret::mint();
  int port = test::free_port();
  std::unique_ptr<plugins::BroadcastGroup> group;
  HttpClient client;

  TestSender(const std::string& url, json extra) : client(url) {
    json init = {{"master_address", "127.0.0.1"},
                 {"master_port", port},
                 {"rank_offset", 1},
                 {"world_size", 2},
                 {"packed", false},
                 {"packed_buffer_size_bytes", 1 << 30},
                 {"packed_num_buffers", 2},
                 {"rank_keys", {{"1", plugins::SessionKeys::rank_key(secret, 1).hex()}}}};
    init.update(extra);
    std::thread join([&] { client.init_weight_transfer_engine(init.dump()); });
    plugins::CommunicatorOptions o;
    o.master_address = "127.0.0.1";
    o.master_port = port;
    o.world_size = 2;
    o.rendezvous_timeout = 20s;
    o.transfer_timeout = std::chrono::seconds(kTransferS);
    o.session_secret = secret.hex();
    group = std::make_unique<plugins::BroadcastGroup>(o);
    join.join();
  }
  // One round: the update info, then `bytes` broadcast (each list one broadcast). The
  // receiver's error, if any.
  std::string round(const json& update, std::vector<std::vector<unsigned char>> broadcasts) {
    client.start_weight_update();
    std::string error;
    std::thread rpc([&] {
      try {
        client.update_weights(update.dump());
      } catch (const std::exception& e) {
        error = e.what();
        group->abort();  // as wt's round bracket does: the refusal ends the broadcast
      }
    });
    try {
      for (auto& b : broadcasts) group->broadcast(b.data(), b.size(), 0, "test broadcast");
    } catch (const std::exception&) {  // the receiver left the broadcast
    }
    rpc.join();
    if (error.empty()) client.finish_weight_update("v");
    return error;
  }
};

std::vector<unsigned char> filled(std::size_t n, unsigned char v) {
  return std::vector<unsigned char>(n, v);
}

// A dense round of one float32 tensor of 256 elements (1024 bytes), broadcast with 1024 + 64 or
// 1024 - 64 bytes: the receiver refuses it naming both sizes, stays up, keeps the weights of the
// last good round, and syncs again on a fresh init.
TEST(NcclTrust, ADenseBroadcastLongerOrShorterThanPromisedIsRefusedAndChangesNothing) {
  Served a = serve();
  const json update = {{"names", {"w"}}, {"dtype_names", {"float32"}}, {"shapes", {{256}}}};
  {
    TestSender s(a.url, json::object());
    ASSERT_EQ(s.round(update, {filled(1024, 1)}), "");
  }
  const auto good = HttpClient(a.url).weight_checksums();
  ASSERT_EQ(good.size(), 1u);
  for (std::size_t bytes : {std::size_t{1088}, std::size_t{960}}) {
    TestSender s(a.url, json::object());
    const auto t0 = Clock::now();
    const std::string error = s.round(update, {filled(bytes, 2)});
    std::cout << bytes << " bytes for 1024: refused in " << since(t0) << " s\n";
    EXPECT_THAT(error, HasSubstr(fmt::format("the sender broadcast {} bytes, this rank expected "
                                             "1024; nothing of it was taken",
                                             bytes)));
    EXPECT_EQ(HttpClient(a.url).weight_checksums(), good) << "the weights are as they were";
  }
  TestSender again(a.url, json::object());
  EXPECT_EQ(again.round(update, {filled(1024, 3)}), "");
  EXPECT_NE(HttpClient(a.url).weight_checksums(), good);
}

// A packed sparse round (one broadcast for the round) of the wrong length is refused alike, and
// one of the right length whose values hold NaN is refused before anything is applied.
TEST(NcclTrust, ASparseRoundOfTheWrongLengthOrWithNaNIsRefusedAndChangesNothing) {
  Served a = serve("sparse_nccl");
  const json update = {
      {"names", {"w"}}, {"dtype_names", {"float32"}}, {"shapes", {{8}}}, {"num_updates_list", {2}}};
  const json format = {{"host_round_format", "packed"}};
  // indices (2 x int32 = 8 bytes) then values (2 x float32 = 8 bytes): 16 bytes.
  std::vector<unsigned char> round(16, 0);
  const int32_t idx[2] = {1, 3};
  const float nan[2] = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  std::memcpy(round.data(), idx, 8);
  std::memcpy(round.data() + 8, nan, 8);
  for (std::size_t bytes : {std::size_t{24}, std::size_t{8}}) {
    TestSender s(a.url, format);
    const std::string error = s.round(update, {filled(bytes, 0)});
    EXPECT_THAT(error, HasSubstr(fmt::format("the sender broadcast {} bytes, this rank expected "
                                             "16; nothing of it was taken",
                                             bytes)));
  }
  TestSender s(a.url, format);
  EXPECT_THAT(s.round(update, {round}),
              HasSubstr("sparse patch 'w': values hold NaN (at position 1)"));
  EXPECT_TRUE(HttpClient(a.url).weight_checksums().empty());
}

// Receiver rank 1 of a world of 4, played by this process: an insider holding its own rank key,
// as every receiver does. It answers the trainer's calls as `wt serve` does and, inside each
// update, relays every broadcast down Gloo's binomial tree by hand (from rank 0, on to rank 3),
// flipping one byte of tensor `alter` in round `alter_round` as it forwards it.
struct RelayingReceiver {
  const std::string alter;
  const int alter_round;
  const std::chrono::milliseconds timeout{kTransferS * 1000};
  httplib::Server server;
  std::thread thread;
  int port = 0;
  std::mutex mu;  // guards what follows: the handlers run on the server's threads
  std::shared_ptr<gloo::rendezvous::Context> context;
  int round = -1;
  Clock::time_point started;  // the altered round's start
  bool altered = false;
  std::vector<std::string> failures;  // what failed in here, for the test's messages

  RelayingReceiver(std::string alter_, int alter_round_)
      : alter(std::move(alter_)), alter_round(alter_round_) {
    server.Get("/get_world_size", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(json{{"world_size", 1}}.dump(), "application/json");
    });
    auto post = [this](const char* path, std::function<void(const httplib::Request&)> f) {
      server.Post(path, [this, f](const httplib::Request& req, httplib::Response& res) {
        try {
          f(req);
          res.set_content(R"({"message":"ok"})", "application/json");
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> l(mu);
          failures.push_back(req.path + ": " + e.what());
          res.status = 500;
          res.set_content(json{{"detail", e.what()}}.dump(), "application/json");
        }
      });
    };
    post("/init_weight_transfer_engine",
         [this](const httplib::Request& req) { join(json::parse(req.body).at("init_info")); });
    post("/start_weight_update", [this](const httplib::Request&) {
      std::lock_guard<std::mutex> l(mu);
      if (++round == alter_round) started = Clock::now();
    });
    post("/update_weights", [this](const httplib::Request& req) {
      const json info = json::parse(req.body).at("update_info");
      // The digests (this rank kept none to compare), or a failed round's end (the trainer's
      // Client::end_weight_update is an update_weights call), or the tensors.
      if (!info.contains("round_digests") && !info.contains("wt_end_weight_update"))
        relay_round(info.at("names"));
    });
    post("/finish_weight_update", [](const httplib::Request&) {});
    post("/end_weight_update", [](const httplib::Request&) {});
    port = server.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { server.listen_after_bind(); });
    while (!server.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~RelayingReceiver() {
    server.stop();
    thread.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }

  // Joins the Gloo mesh with wt's own rendezvous, as the rank the init info names.
  void join(const json& info) {
    plugins::CommunicatorOptions o;
    o.master_address = info.at("master_address").get<std::string>();
    o.master_port = info.at("master_port").get<int>();
    o.rank_key = info.at("rank_keys").at("1").get<std::string>();  // its own, all it was given
    o.world_size = info.at("world_size").get<int>();
    o.rank = info.at("rank_offset").get<int>();
    o.rendezvous_timeout = 20s;
    o.transfer_timeout = timeout;
    if (o.rank != 1 || o.world_size != 4)
      throw std::runtime_error(
          fmt::format("rank {} of {}: this relay is rank 1 of 4", o.rank, o.world_size));
    plugins::SigpipeBlocked no_sigpipe;  // also for Gloo's loop thread, started in here
    auto mesh = plugins::form_gloo_mesh(o, nullptr);
    std::lock_guard<std::mutex> l(mu);
    context = std::move(mesh);
  }

  // One gloo::broadcast from rank 0 as rank 1 of 4 takes part in it (gloo/broadcast.cc): receive
  // from rank 0, then send to rank 3, on the broadcast slot of tag 0.
  void relay(gloo::rendezvous::Context& ctx, void* data, std::size_t bytes, bool flip) {
    const auto slot = gloo::Slot::build(gloo::kBroadcastSlotPrefix, 0);
    auto buffer = ctx.createUnboundBuffer(data, bytes);
    buffer->recv(0, slot);
    if (!buffer->waitRecv(timeout)) throw std::runtime_error("the receive from rank 0 was aborted");
    if (flip) static_cast<unsigned char*>(data)[bytes / 2] ^= 0x01;
    buffer->send(3, slot);
    if (!buffer->waitSend(timeout)) throw std::runtime_error("the send to rank 3 was aborted");
  }

  // Every broadcast of a round: each is two on the wire, its frame (magic, number, length) and
  // then, when the length is not 0, the data.
  void relay_round(const json& names) {
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    int r = 0;
    {
      std::lock_guard<std::mutex> l(mu);
      ctx = context;
      r = round;
    }
    if (!ctx) throw std::runtime_error("update before the mesh formed");
    plugins::SigpipeBlocked no_sigpipe;
    for (const auto& name : names) {
      unsigned char frame[plugins::BroadcastGroup::kFrameBytes];
      relay(*ctx, frame, sizeof frame, false);
      const uint64_t bytes = plugins::get_le(frame + 8, 8);
      if (bytes == 0) continue;
      std::vector<unsigned char> data(bytes);
      const bool flip = r == alter_round && name.get<std::string>() == alter;
      relay(*ctx, data.data(), data.size(), flip);
      if (flip) {
        std::lock_guard<std::mutex> l(mu);
        altered = true;
      }
    }
  }
};

// An insider on the data plane: this process joins as receiver rank 1 and relays honestly in the
// first round, then flips one byte of a tensor it forwards to rank 3 (Gloo's binomial tree over
// 4 ranks: 0 sends to 1 and 2, 1 forwards to 3). Rank 3 (c) finds that the bytes differ from the
// trainer's digests and refuses the round naming the tensor; the round fails as a whole, so
// neither c nor b (who took the bytes from the trainer itself) commits it: both keep the first
// round's weights, and the trainer's report names c and the tensor.
TEST(NcclTrust, AReceiverThatAltersWhatItRelaysIsCaughtBeforeTheNextOneCommits) {
  const std::string altered = "model.layers.7.mlp.gate_up_proj.weight";
  RelayingReceiver relay(altered, 1);
  Served b = serve(), c = serve();
  Served fake{nullptr, relay.url()};
  // FanOutClient hands out rank offsets in URL order: the relay is rank 1, b rank 2, c rank 3.
  cli::Child t(trainer({&fake, &b, &c}, test::free_port(), 2));
  const auto deadline = Clock::now() + 30s;
  while (!t.at_eof() && Clock::now() < deadline)
    t.next_line(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  const auto exited = Clock::now();
  ASSERT_TRUE(t.at_eof()) << "the trainer did not end within 30 s\n" << t.output();
  const int rc = t.wait();
  std::vector<std::string> failures;
  {
    std::lock_guard<std::mutex> l(relay.mu);
    failures = relay.failures;
    ASSERT_TRUE(relay.altered) << t.output() << ::testing::PrintToString(failures);
    std::cout << "a relay altered '" << altered << "': the trainer exited " << rc << ", "
              << std::chrono::duration<double>(exited - relay.started).count()
              << " s after the round started\n"
              << t.output();
  }
  EXPECT_TRUE(failures.empty()) << ::testing::PrintToString(failures);
  EXPECT_NE(rc, 0) << t.output();
  EXPECT_THAT(t.output(), HasSubstr("round 0 ok"));  // the honest round, relayed alike
  EXPECT_THAT(t.output(), HasSubstr("receiver 3 of 3 (" + c.url + ")"));
  EXPECT_THAT(t.output(), HasSubstr("the bytes of the broadcast of '" + altered +
                                    "' differ from what the trainer sent"));
  // What both held before the altered round: the first round's weights ("round 0 ok" came after
  // every receiver committed them).
  const auto before = test::expected_after(1, 40, 64, 0);
  EXPECT_EQ(HttpClient(c.url).weight_checksums(), before) << "c committed nothing of the round";
  EXPECT_EQ(HttpClient(b.url).weight_checksums(), before) << "b committed nothing of the round";
}

// Receiver 2 is stopped (SIGSTOP) while the trainer broadcasts to it, then killed: the trainer
// reports it, naming it, within a second of its death, though Gloo alone would wait for the
// transfer deadline. Receiver 1 keeps round 0's weights.
TEST(NcclTrust, AReceiverKilledInsideABroadcastIsReportedWithinASecondNamingIt) {
  Served a = serve(), b = serve();
  cli::Child t(trainer({&a, &b}, test::free_port(), 2,
                       {"--pause-at-tensor", "20", "--pause-round", "1", "--pause-ms", "500"}));
  ASSERT_TRUE(t.wait_for("paused at tensor 20", 60s)) << t.output();
  b.process->kill(SIGSTOP);
  std::this_thread::sleep_for(1500ms);  // the trainer is back inside a broadcast to b
  b.process->kill(SIGKILL);
  const auto killed = Clock::now();
  EXPECT_NE(t.wait(), 0) << t.output();
  const double took = since(killed);
  std::cout << "receiver killed inside a broadcast: trainer failed " << took << " s later\n"
            << t.output();
  EXPECT_LT(took, 1.0) << t.output();
  EXPECT_THAT(t.output(), HasSubstr("receiver 2 of 2 (" + b.url + ")"));
  b.process->wait();
  EXPECT_EQ(HttpClient(a.url).weight_checksums(), test::expected_after(1, 40, 64, 0));
}

// A group that cannot form (world_size 3, one receiver of 1 rank) is reported within the trainer's
// own rendezvous deadline (2 s), not when the init call's HTTP timeout (60 s here) or the worker's
// own deadline (60 s) runs out; the receiver answers the init with its failure and takes the next
// init.
// A trainer of `world` ranks (a 2 s rendezvous deadline, a 60 s HTTP deadline) against receiver
// `a`, whose group does not form: it fails, within a few seconds, naming the rendezvous.
void expect_init_fails_at_the_rendezvous_deadline(const Served& a, int world, const char* what) {
  const nlohmann::json init = {{"master_address", "127.0.0.1"},
                               {"master_port", test::free_port()},
                               {"world_size", world},
                               {"rendezvous_timeout_s", 2},
                               {"transfer_timeout_s", kTransferS}};
  const auto t0 = Clock::now();
  cli::Child t(std::vector<std::string>{WT_TEST_TRAINER_PATH, "--backend", "nccl", "--init-info",
                                        init.dump(), "--rounds", "1", "--url", a.url,
                                        "--http-timeout-s", "60"});
  EXPECT_NE(t.wait(), 0) << t.output();
  const double took = since(t0);
  std::cout << what << ": the trainer's init failed after " << took
            << " s (rendezvous deadline 2 s, HTTP deadline 60 s)\n"
            << t.output();
  EXPECT_LT(took, 8.0) << t.output();
  EXPECT_THAT(t.output(), HasSubstr(fmt::format("rendezvous of {} ranks at 127.0.0.1:", world)));
}

TEST(NcclTrust, AGroupThatCannotFormIsReportedWithinTheTrainersRendezvousDeadline) {
  Served a = serve();
  expect_init_fails_at_the_rendezvous_deadline(a, 3, "a group that cannot form");
  cli::Child again(trainer({&a}, test::free_port(), 1));
  ASSERT_EQ(again.wait(), 0) << again.output() << a.process->output();
  EXPECT_EQ(HttpClient(a.url).weight_checksums(), test::expected_after(1, 40, 64, 0));
}

// A receiver stopped before the init (SIGSTOP: its port takes the connection, nothing answers):
// the rendezvous fails at its deadline, and the trainer reports it then, not at the HTTP client's
// deadline (60 s here), since the engine interrupts the init call it gives up on (the host's
// abandon_calls).
TEST(NcclTrust, AStoppedReceiverDoesNotHoldAFailedInitPastTheRendezvousDeadline) {
  Served a = serve();
  a.process->kill(SIGSTOP);
  expect_init_fails_at_the_rendezvous_deadline(a, 2, "a stopped receiver");
  a.process->kill(SIGKILL);
  a.process->wait();
}

// A receiver stopped for good (SIGSTOP, its connections open): the round fails at the transfer
// deadline, not at the HTTP call's (300 s by default).
TEST(NcclTrust, AStoppedReceiverFailsTheRoundAtTheTransferDeadline) {
  Served a = serve(), b = serve();
  cli::Child t(trainer({&a, &b}, test::free_port(), 2,
                       {"--pause-at-tensor", "20", "--pause-round", "1", "--pause-ms", "500"}));
  ASSERT_TRUE(t.wait_for("paused at tensor 20", 60s)) << t.output();
  b.process->kill(SIGSTOP);
  const auto stopped = Clock::now();
  EXPECT_NE(t.wait(), 0) << t.output();
  const double took = since(stopped);
  std::cout << "receiver stopped: trainer failed " << took << " s later (transfer deadline "
            << kTransferS << " s)\n"
            << t.output();
  EXPECT_LT(took, kTransferS + 3.0);
  EXPECT_THAT(t.output(), HasSubstr("did not take part in time"));
  b.process->kill(SIGKILL);
  b.process->wait();
}

// The receivers hold the model of a first round; a trainer whose model drifted (another width)
// is refused by them at its first tensor, naming it and both shapes, within a second, and their
// weights stay.
TEST(NcclTrust, ADriftedTrainerIsRefusedNamingTheTensorAndChangesNothing) {
  Served a = serve();
  cli::Child first(trainer({&a}, test::free_port(), 1));
  ASSERT_EQ(first.wait(), 0) << first.output();
  const auto held = HttpClient(a.url).weight_checksums();
  cli::Child drifted(trainer({&a}, test::free_port(), 1, {"--width", "32"}));
  const auto t0 = Clock::now();
  EXPECT_NE(drifted.wait(), 0);
  std::cout << "drifted trainer refused; its process ended " << since(t0) << " s after start\n"
            << drifted.output();
  EXPECT_LT(since(t0), static_cast<double>(kTransferS));
  EXPECT_THAT(drifted.output(), HasSubstr("arrives as bfloat16 256x32"));
  EXPECT_THAT(drifted.output(), HasSubstr("but the model this receiver holds has it as"));
  EXPECT_EQ(HttpClient(a.url).weight_checksums(), held);
}

// 200 clients poll the receivers' /health over kept-alive connections (more than the server's
// 64 threads) while a trainer runs three rounds: every round completes.
TEST(NcclTrust, TwoHundredPollingClientsDoNotKeepTheTrainersCallsOut) {
  Served a = serve(), b = serve();
  std::atomic<bool> stop{false};
  std::atomic<int> polls{0};
  std::vector<std::thread> pollers;
  for (int i = 0; i < 200; ++i)
    pollers.emplace_back([&, i] {
      const std::string url = (i % 2 ? a.url : b.url);
      httplib::Client c(url);
      c.set_keep_alive(true);
      c.set_connection_timeout(5);
      c.set_read_timeout(5);
      while (!stop) {
        if (c.Get("/health")) ++polls;
        std::this_thread::sleep_for(20ms);
      }
    });
  std::this_thread::sleep_for(500ms);
  const auto t0 = Clock::now();
  cli::Child t(trainer({&a, &b}, test::free_port(), 3));
  const int rc = t.wait();
  const double took = since(t0);
  stop = true;
  for (auto& p : pollers) p.join();
  ASSERT_EQ(rc, 0) << t.output();
  std::cout << "3 rounds with 200 polling clients took " << took << " s (" << polls.load()
            << " polls answered)\n"
            << t.output();
  EXPECT_EQ(HttpClient(a.url).weight_checksums(), test::expected_after(3, 40, 64, 0));
}

// 200 clients poll two token-protected receivers every 100 ms over kept-alive connections while a
// trainer runs three rounds: half of them with the token (/health, answered), half without (every
// request a 401, the connection closed, and reopened at once). The three rounds take at most a
// second more each than they do without the pollers, measured in the same test. (At 20 ms, 10,000
// requests a second, the rounds still complete but share two cores with the pollers: 6-7 s for
// what takes 0.8 s alone.)
TEST(NcclTrust, TwoHundredPollersWithAndWithoutTheTokenDelayNoRoundBeyondASecond) {
  const std::string token = "poll-test-token";
  const nlohmann::json config = {
      {"backend", "nccl"}, {"rendezvous_timeout_s", 20}, {"transfer_timeout_s", kTransferS}};
  auto start = [&] {
    auto [child, url] = cli::start_server(
        WT_CLI_PATH, {"--weight-transfer-config", config.dump(), "--token", token});
    return Served{std::move(child), url};
  };
  Served a = start(), b = start();
  auto rounds = [&] {
    const auto t0 = Clock::now();
    cli::Child t(trainer({&a, &b}, test::free_port(), 3, {"--token", token}));
    const int rc = t.wait();
    EXPECT_EQ(rc, 0) << t.output();
    return since(t0);
  };
  const double alone = rounds();
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0}, refused{0};
  std::vector<std::thread> pollers;
  for (int i = 0; i < 200; ++i)
    pollers.emplace_back([&, i] {
      httplib::Client c(i % 2 ? a.url : b.url);
      c.set_keep_alive(true);
      c.set_connection_timeout(5);
      c.set_read_timeout(5);
      const bool with_token = i % 4 < 2;
      if (with_token) c.set_bearer_token_auth(token);
      while (!stop) {
        if (auto r = c.Get("/health")) ++(r->status == 200 ? answered : refused);
        std::this_thread::sleep_for(100ms);
      }
    });
  std::this_thread::sleep_for(500ms);
  const double polled = rounds();
  stop = true;
  for (auto& p : pollers) p.join();
  std::cout << "3 rounds: " << alone << " s alone, " << polled << " s with 200 pollers ("
            << answered.load() << " polls answered, " << refused.load() << " refused with 401)\n";
  EXPECT_GT(answered.load(), 0);
  EXPECT_GT(refused.load(), 0);
  EXPECT_LT(polled - alone, 3.0) << "more than a second a round";
  EXPECT_EQ(HttpClient(a.url, {.bearer_token = token}).weight_checksums(),
            test::expected_after(3, 40, 64, 0));
}

// The listening TCP ports of process `pid` (its sockets in /proc/net/tcp, state LISTEN): what a
// local stranger can list and race the real peers to.
std::set<int> listening_ports(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid), ec)) {
    std::error_code lec;
    const std::string target = std::filesystem::read_symlink(e.path(), lec).string();
    if (!lec && target.rfind("socket:[", 0) == 0)
      inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<int> ports;
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // the header
  while (std::getline(tcp, line)) {
    std::istringstream in(line);
    std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
    in >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
    if (state == "0A" && inodes.count(inode) != 0)
      ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
  }
  return ports;
}

// A local stranger watches every process of the group for new listening ports (the Gloo pairs,
// while the group forms) and races the real peers to each with a Gloo frame that plain Gloo cannot
// place (it would end the process that parses it). Whatever the race gives, no process dies: a
// group that a stranger reached fails naming the rank, and the receivers sync byte exact at the
// next init.
TEST(NcclTrust, AStrangerRacingThePeersToTheGlooPairPortsEndsNoProcess) {
  Served a = serve(), b = serve();
  std::set<int> known;  // the control plane's ports, and whatever listened before
  for (auto* r : {&a, &b}) {
    const auto before = listening_ports(r->process->pid());
    known.insert(before.begin(), before.end());
  }
  uint64_t preamble[6] = {48 + 8, /*SEND_UNBOUND_BUFFER*/ 1, /*slot*/ 777, 0, 8, 0};
  std::string frame(reinterpret_cast<const char*>(preamble), sizeof preamble);
  frame += std::string(8, 'x');
  std::atomic<bool> stop{false};
  std::atomic<pid_t> trainer_pid{0};
  std::vector<int> held;
  std::thread attacker([&] {
    while (!stop) {
      std::vector<pid_t> pids{a.process->pid(), b.process->pid()};
      if (trainer_pid != 0) pids.push_back(trainer_pid);
      for (pid_t pid : pids)
        for (int port : listening_ports(pid)) {
          if (!known.insert(port).second) continue;
          const int fd = dial_loopback(port);
          if (fd >= 0) {
            ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL);
            held.push_back(fd);
          }
        }
      std::this_thread::sleep_for(200us);
    }
  });
  cli::Child t(trainer({&a, &b}, test::free_port(), 1));
  trainer_pid = t.pid();
  const int rc = t.wait();
  stop = true;
  attacker.join();
  for (int fd : held) ::close(fd);
  std::cout << "the stranger reached " << held.size() << " listening ports; the trainer exited "
            << rc << "\n"
            << t.output();
  if (rc != 0) {
    EXPECT_THAT(t.output(), HasSubstr("did not prove"));
  }
  // Both receivers are up and take the next init.
  cli::Child again(trainer({&a, &b}, test::free_port(), 2));
  ASSERT_EQ(again.wait(), 0) << again.output() << a.process->output() << b.process->output();
  const auto expected = test::expected_after(2, 40, 64, 0);
  EXPECT_EQ(HttpClient(a.url).weight_checksums(), expected);
  EXPECT_EQ(HttpClient(b.url).weight_checksums(), expected);
}

// One trainer and 64 receivers (a small model): the store admits a world of 65, the group forms
// and every receiver is byte exact.
TEST(NcclTrust, OneTrainerAndSixtyFourReceiversSync) {
  std::vector<Served> receivers;
  for (int i = 0; i < 64; ++i) receivers.push_back(serve());
  std::vector<Served*> all;
  for (auto& r : receivers) all.push_back(&r);
  const auto t0 = Clock::now();
  cli::Child t(trainer(all, test::free_port(), 2, {"--layers", "4", "--width", "16"}));
  ASSERT_EQ(t.wait(), 0) << t.output();
  std::cout << "1 + 64 ranks: init and 2 rounds in " << since(t0) << " s\n" << t.output();
  const auto expected = test::expected_after(2, 4, 16, 0);
  for (auto& r : receivers) EXPECT_EQ(HttpClient(r.url).weight_checksums(), expected) << r.url;
}

}  // namespace
}  // namespace wt
