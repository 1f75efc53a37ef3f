// Gloo pairs that prove their pair's key on the bare socket (plugins/common/proving_device), as
// an attacker on the pair ports sees them: a stranger who takes a pair's port before the real peer
// and sends a malformed Gloo frame (plain Gloo parses it on its loop thread and ends the process),
// one who connects and stays silent, and a peer that proves the secret and then sends a malformed
// frame, and an insider holding one rank's key that connects as another. The ranks are threads of
// this process, so a frame that ended the process would end the test; the rendezvous store is
// Gloo's in-memory one, gated so the stranger is always first.
#include "proving_device.hpp"
#include "gloo_mesh.hpp"
#include "session_keys.hpp"

#include <wt/sdk/errors.hpp>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/address.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

using ::testing::HasSubstr;
using namespace std::chrono_literals;

namespace wt::plugins {
namespace {

using Clock = std::chrono::steady_clock;

const SessionSecret kSecret = SessionSecret::from_hex(std::string(64, 'a'), "secret");

// Rank 0 as the trainer holds it (the secret); rank r > 0 as a worker does: its own key, which
// derives the key of its pairs with lower ranks.
std::shared_ptr<const SessionKeys> keys_of(int rank) {
  return std::make_shared<SessionKeys>(
      rank == 0 ? SessionKeys::of_secret(kSecret, 0)
                : SessionKeys::of_rank_key(SessionKeys::rank_key(kSecret, rank), rank));
}

// Gloo's in-memory store whose reads of pair addresses wait until the test opens it: every rank
// has published its pairs' addresses (and its pairs listen) but none has connected yet. (The
// ranks' host names, "rank_N", pass.)
class GatedStore final : public gloo::rendezvous::Store {
 public:
  void set(const std::string& key, const std::vector<char>& data) override {
    inner_.set(key, data);
    std::lock_guard<std::mutex> l(mu_);
    published_[key] = data;
    cv_.notify_all();
  }
  std::vector<char> get(const std::string& key) override {
    if (key.rfind("rank_", 0) != 0) wait_open();
    return inner_.get(key);
  }
  void wait(const std::vector<std::string>& keys) override {
    if (keys.empty() || keys[0].rfind("rank_", 0) != 0) wait_open();
    inner_.wait(keys);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    if (keys.empty() || keys[0].rfind("rank_", 0) != 0) wait_open();
    inner_.wait(keys, t);
  }

  // What `key` was set to, once it was.
  std::vector<char> published(const std::string& key) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return published_.count(key) != 0; });
    return published_[key];
  }
  void open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  void wait_open() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return open_; });
  }

  gloo::rendezvous::HashStore inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<char>> published_;
  bool open_ = false;
};

// The listening address rank `r` published for its pair with the other rank of a world of two.
sockaddr_storage pair_address(GatedStore& store, int r) {
  return gloo::transport::tcp::Address(store.published(std::to_string(r))).getSockaddr();
}

int dial(const sockaddr_storage& a) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(sockaddr_in)), 0);
  return fd;
}

// A Gloo frame no pair expects: 8 bytes for an unbound buffer in a slot nobody receives in. Plain
// Gloo enforces on its loop thread that a receive is pending there, and throws: std::terminate.
std::vector<char> malformed_frame() {
  uint64_t preamble[6] = {48 + 8, /*SEND_UNBOUND_BUFFER*/ 1, /*slot*/ 777, 0, 8, 0};
  std::vector<char> out(sizeof preamble + 8, 'x');
  std::memcpy(out.data(), preamble, sizeof preamble);
  return out;
}

void send_all(int fd, const void* p, std::size_t n) {
  ASSERT_EQ(::send(fd, p, n, MSG_NOSIGNAL), static_cast<ssize_t>(n));
}

bool recv_all(int fd, void* p, std::size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t rv = ::recv(fd, c, n, 0);
    if (rv <= 0) return false;
    c += rv;
    n -= static_cast<std::size_t>(rv);
  }
  return true;
}

// Two ranks forming a mesh on `store` with proving devices; errors come back per rank, with the
// time each took from `opened` (set by the caller when it opens the store).
struct TwoRanks {
  std::string errors[2];
  Clock::time_point ended[2];
  std::thread threads[2];

  TwoRanks(GatedStore& store, std::chrono::milliseconds deadline) {
    for (int r = 0; r < 2; ++r)
      threads[r] = std::thread([this, &store, r, deadline] {
        try {
          auto device = make_proving_device("127.0.0.1", keys_of(r), Clock::now() + deadline);
          auto context = std::make_shared<gloo::rendezvous::Context>(r, 2);
          context->setTimeout(deadline);
          context->connectFullMesh(store, device);
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
        ended[r] = Clock::now();
      });
  }
  void join() {
    for (auto& t : threads) t.join();
  }
};

TEST(ProvingDevice, AStrangerWhoTakesAPairsPortFirstAndSendsAMalformedFrameIsRefused) {
  GatedStore store;
  TwoRanks ranks(store, 10s);
  const std::vector<char> frame = malformed_frame();
  int strangers[2];
  for (int r = 0; r < 2; ++r) {
    strangers[r] = dial(pair_address(store, r));
    send_all(strangers[r], frame.data(), frame.size());
  }
  std::this_thread::sleep_for(200ms);  // the loop threads read the frame (plain Gloo: terminate)
  const auto opened = Clock::now();
  store.open();
  ranks.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(ranks.errors[r],
                HasSubstr(fmt::format("the peer connected as rank {} did not prove the key of its "
                                      "pair with rank {}: it is not rank {} (a stranger on the "
                                      "pair's port?); no weight was sent",
                                      1 - r, r, 1 - r)))
        << "rank " << r;
    EXPECT_LT(ranks.ended[r] - opened, 1s) << "rank " << r;
    ::close(strangers[r]);
  }
}

// A stranger connected to both ranks' pair ports passes each rank's nonce to the other and each
// answer back: both sides accepted, so neither answer carries the dialler's role, and neither
// rank takes the stranger's socket for its peer.
TEST(ProvingDevice, AStrangerWhoPassesEachSidesAnswerToTheOtherIsRefused) {
  GatedStore store;
  TwoRanks ranks(store, 3s);
  const int s0 = dial(pair_address(store, 0)), s1 = dial(pair_address(store, 1));
  Nonce n0{}, n1{};
  ASSERT_TRUE(recv_all(s0, n0.data(), n0.size()));
  ASSERT_TRUE(recv_all(s1, n1.data(), n1.size()));
  send_all(s0, n1.data(), n1.size());
  send_all(s1, n0.data(), n0.size());
  Mac a0{}, a1{};
  ASSERT_TRUE(recv_all(s0, a0.data(), a0.size()));
  ASSERT_TRUE(recv_all(s1, a1.data(), a1.size()));
  send_all(s0, a1.data(), a1.size());
  send_all(s1, a0.data(), a0.size());
  std::this_thread::sleep_for(200ms);
  store.open();
  ranks.join();
  for (int r = 0; r < 2; ++r)
    EXPECT_THAT(ranks.errors[r], HasSubstr("did not prove the key of its pair")) << "rank " << r;
  ::close(s0);
  ::close(s1);
}

// A stranger who connects and says nothing holds the pair until the rendezvous deadline, no
// longer; the rank it holds says why.
TEST(ProvingDevice, ASilentStrangerFailsThePairAtTheRendezvousDeadline) {
  GatedStore store;
  const auto start = Clock::now();
  TwoRanks ranks(store, 2s);
  int strangers[2];
  for (int r = 0; r < 2; ++r) strangers[r] = dial(pair_address(store, r));
  store.open();
  ranks.join();
  int named = 0;
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(ranks.errors[r], "") << "rank " << r;
    named += ranks.errors[r].find("did not prove its pair's key in time") != std::string::npos;
    EXPECT_LT(ranks.ended[r] - start, 3500ms) << "rank " << r;
    ::close(strangers[r]);
  }
  EXPECT_GE(named, 1) << ranks.errors[0] << " | " << ranks.errors[1];
}

// A peer that proves the secret and then sends a frame Gloo cannot place: the pair fails with a
// message naming the rank, the process goes on.
// Rank 1 of a world of two, by hand, beside a real rank 0 on `store`: a socket of its own as its
// pair's address; connect() then proves the secret on the pair's socket as a real peer would, and
// returns that socket (Gloo's frames follow on it).
class HandMadeRank1 {
 public:
  explicit HandMadeRank1(gloo::rendezvous::Store& store) : store_(store) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    mine_.sin_family = AF_INET;
    mine_.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&mine_), sizeof mine_), 0);
    EXPECT_EQ(::listen(listener_, 1), 0);
    socklen_t len = sizeof mine_;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&mine_), &len);
    sockaddr_storage ss{};
    std::memcpy(&ss, &mine_, sizeof mine_);
    store.set("1", gloo::transport::tcp::Address(ss).bytes());
  }
  ~HandMadeRank1() {
    if (fd_ >= 0) ::close(fd_);
    ::close(listener_);
  }

  int connect() {
    // Who dials whom is Gloo's rule: the pair whose address compares higher (same host: port, as
    // stored) connects to the other.
    store_.wait({"0"}, 10s);
    const sockaddr_storage theirs_ss = gloo::transport::tcp::Address(store_.get("0")).getSockaddr();
    sockaddr_in theirs{};
    std::memcpy(&theirs, &theirs_ss, sizeof theirs);
    const bool rank0_dials =
        static_cast<int>(theirs.sin_port) - static_cast<int>(mine_.sin_port) > 0;
    fd_ = rank0_dials ? ::accept(listener_, nullptr, nullptr) : dial(theirs_ss);
    EXPECT_GE(fd_, 0);
    Nonce their_nonce{}, my_nonce{};
    my_nonce.fill(0x42);
    EXPECT_TRUE(recv_all(fd_, their_nonce.data(), their_nonce.size()));
    send_all(fd_, my_nonce.data(), my_nonce.size());
    std::string m(as_view(their_nonce));
    // From rank 1, to rank 0, as the side that accepted ('a') or dialled ('d').
    const char ranks10[9] = {1, 0, 0, 0, 0, 0, 0, 0, rank0_dials ? 'a' : 'd'};
    m.append(ranks10, sizeof ranks10);
    const Mac answer =
        SessionKeys::pair_key(SessionKeys::rank_key(kSecret, 1), 0).mac("wt gloo pair", m);
    send_all(fd_, answer.data(), answer.size());
    Mac theirs_answer{};
    EXPECT_TRUE(recv_all(fd_, theirs_answer.data(), theirs_answer.size()));
    return fd_;
  }

 private:
  gloo::rendezvous::Store& store_;
  int listener_ = -1, fd_ = -1;
  sockaddr_in mine_{};
};

// An insider: a worker holding rank 2's key takes rank 1's place beside rank 0 (it read rank 0's
// pair address from the store, as any rank may). Its answer is made with rank 2's key, so rank 0
// does not take it for rank 1, and says which rank it claimed to be.
TEST(ProvingDevice, AnInsiderHoldingOneRanksKeyCannotActAsAnother) {
  gloo::rendezvous::HashStore store;
  std::string errors[2];
  std::vector<std::thread> threads;
  const std::shared_ptr<const SessionKeys> keys[2] = {
      keys_of(0), std::make_shared<SessionKeys>(
                      SessionKeys::of_rank_key(SessionKeys::rank_key(kSecret, 2), 1))};
  const auto t0 = Clock::now();
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        auto device = make_proving_device("127.0.0.1", keys[r], Clock::now() + 3s);
        auto context = std::make_shared<gloo::rendezvous::Context>(r, 2);
        context->setTimeout(3s);
        context->connectFullMesh(store, device);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_THAT(errors[0], HasSubstr("the peer connected as rank 1 did not prove the key of its pair "
                                   "with rank 0: it is not rank 1"));
  EXPECT_THAT(errors[1], HasSubstr("did not prove")) << "rank 0's answer is not one for it either";
  EXPECT_LT(Clock::now() - t0, 5s);
}

TEST(ProvingDevice, AMalformedFrameAfterTheProofFailsThePairNotTheProcess) {
  gloo::rendezvous::HashStore store;
  auto device = make_proving_device("127.0.0.1", keys_of(0), Clock::now() + 10s);
  auto context = std::make_shared<gloo::rendezvous::Context>(0, 2);
  context->setTimeout(10s);
  HandMadeRank1 rank1(store);

  std::string error;
  std::thread rank0([&] {
    try {
      context->connectFullMesh(store, device);
      int x = 0;
      auto buf = context->createUnboundBuffer(&x, sizeof x);
      buf->recv(1, 5);
      buf->waitRecv(10s);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  const int fd = rank1.connect();
  const std::vector<char> frame = malformed_frame();
  send_all(fd, frame.data(), frame.size());
  rank0.join();
  EXPECT_THAT(error, HasSubstr("the pair with rank 1 failed"));
}

// A peer that holds the secret answers a 32-byte receive with a 16-byte message. Plain Gloo
// completes the receive, and the other 16 bytes keep whatever the buffer held: a receiver would
// commit bytes nobody sent. The pair refuses the message before a byte of it lands.
TEST(ProvingDevice, AMessageShorterThanItsReceiveFailsThePairAndLandsNothing) {
  gloo::rendezvous::HashStore store;
  auto device = make_proving_device("127.0.0.1", keys_of(0), Clock::now() + 10s);
  auto context = std::make_shared<gloo::rendezvous::Context>(0, 2);
  context->setTimeout(10s);
  HandMadeRank1 rank1(store);

  std::vector<unsigned char> into(32, 0x5a);
  std::string error;
  bool completed = false;
  std::thread rank0([&] {
    try {
      context->connectFullMesh(store, device);
      auto buf = context->createUnboundBuffer(into.data(), into.size());
      buf->recv(1, 5);
      completed = buf->waitRecv(10s);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  const int fd = rank1.connect();
  // Rank 0's "ready to receive" for slot 5, then 16 bytes for it.
  uint64_t ready[6] = {};
  ASSERT_TRUE(recv_all(fd, ready, sizeof ready));
  ASSERT_EQ(ready[1], 3u);  // NOTIFY_RECV_READY
  ASSERT_EQ(ready[2], 5u);
  ASSERT_EQ(ready[4], 32u);
  uint64_t preamble[6] = {48 + 16, /*SEND_UNBOUND_BUFFER*/ 1, /*slot*/ 5, 0, 16, 0};
  std::vector<char> frame(sizeof preamble + 16, 'x');
  std::memcpy(frame.data(), preamble, sizeof preamble);
  send_all(fd, frame.data(), frame.size());
  rank0.join();
  EXPECT_FALSE(completed);
  EXPECT_THAT(error, HasSubstr("rank 1 sent a message of 16 bytes for a receive of 32 bytes"));
  EXPECT_EQ(into, std::vector<unsigned char>(32, 0x5a));
}

}  // namespace
}  // namespace wt::plugins
