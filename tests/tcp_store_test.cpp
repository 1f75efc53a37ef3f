// The rendezvous store of the nccl backends (plugins/common/tcp_store) and the Gloo group formed
// on it (broadcast_group): values across clients, deadlines, one deadline for a whole
// rendezvous, and an attacker's view: strangers without a rank's key, a store of another session
// on the port, keys set twice, a rank setting another rank's keys or connecting as another rank,
// values and stores too large, connections held idle, a peer that fails the pair challenge,
// broadcasts of the wrong length, an abort of a root with three children, and a peer that died
// under a write (SIGPIPE).
#include "tcp_store.hpp"
#include "broadcast_group.hpp"
#include "session_secret.hpp"
#include "support/loopback_rank.hpp"

#include <wt/sdk/errors.hpp>

#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

using ::testing::HasSubstr;
using namespace std::chrono_literals;

namespace wt::plugins {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<char> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

int raw_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// Whether the server closed `fd` (reads until EOF or 3 s).
bool closed_by_server(int fd) {
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[256];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

struct Warnings {
  std::mutex mu;
  std::vector<std::string> lines;
  TcpStoreServer::Warn sink() {
    return [this](const std::string& m) {
      std::lock_guard<std::mutex> l(mu);
      lines.push_back(m);
    };
  }
  std::string all() {
    std::lock_guard<std::mutex> l(mu);
    std::string out;
    for (auto& s : lines) out += s + "\n";
    return out;
  }
};

const SessionSecret kSecret = SessionSecret::mint();

// Rank `rank` as a trainer rank holds it (the secret) and as a worker does (its own key only).
SessionKeys trainer(int rank) {
  return SessionKeys::of_secret(kSecret, rank);
}
SessionKeys worker(int rank) {
  return SessionKeys::of_rank_key(SessionKeys::rank_key(kSecret, rank), rank);
}

TcpStoreServer::Limits quick() {
  TcpStoreServer::Limits l;
  l.auth_deadline = 300ms;
  l.request_deadline = 300ms;
  return l;
}

TEST(TcpStore, ValuesSetByOneClientAreSeenByAnotherAndAKeyIsSetOnce) {
  TcpStoreServer server("127.0.0.1", 0, kSecret, {});
  TcpStoreClient a("127.0.0.1", server.port(), trainer(0), Clock::now() + 2s),
      b("127.0.0.1", server.port(), worker(1), Clock::now() + 2s),
      again("127.0.0.1", server.port(), trainer(0), Clock::now() + 2s);
  a.set("0", bytes("address of rank 0"));
  b.wait({"0"});
  EXPECT_EQ(b.get("0"), bytes("address of rank 0"));
  b.set("rank_1", bytes(""));  // empty values are values
  EXPECT_EQ(a.get("rank_1"), bytes(""));
  try {
    again.set("0", bytes("another address"));
    FAIL() << "a key was overwritten";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_STATE);
    EXPECT_THAT(e.what(), HasSubstr("key '0' is already set"));
  }
  EXPECT_EQ(a.get("0"), bytes("address of rank 0"));
}

// An insider: a worker that legitimately holds rank 1's key sets the keys of other ranks first,
// so that their own sets fail (a squat) or their peers meet it instead. Every such set is refused
// and logged, nothing is stored, and the ranks named set their own keys after it.
TEST(TcpStore, ARankSetsItsOwnKeysOnly) {
  Warnings w;
  TcpStoreServer server("127.0.0.1", 0, kSecret, TcpStoreServer::Limits::for_world(3), w.sink());
  TcpStoreClient insider("127.0.0.1", server.port(), worker(1), Clock::now() + 2s);
  for (const char* key : {"2", "rank_2", "0", "rank_0", "12", "rank_1x", "x"}) {
    try {
      insider.set(key, bytes("the insider's address"));
      FAIL() << "rank 1 set key '" << key << "'";
    } catch (const sdk::Error& e) {
      EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
      EXPECT_THAT(e.what(),
                  HasSubstr(fmt::format(
                      "rank 1 may not set key '{}' (a rank sets its own keys only, and a pair's "
                      "address only for its own pairs, in at most 192 bytes)",
                      key)));
    }
  }
  EXPECT_THAT(w.all(), HasSubstr("rank 1 (127.0.0.1:"));
  EXPECT_THAT(w.all(), HasSubstr("tried to set key 'rank_2', which is not its own; refused"));
  TcpStoreClient honest("127.0.0.1", server.port(), worker(2), Clock::now() + 2s);
  honest.set("2", bytes("rank 2's address"));
  honest.set("rank_2", bytes("rank 2's host"));
  EXPECT_EQ(insider.get("2"), bytes("rank 2's address"));
  insider.set("1", bytes("rank 1's address"));  // its own
  EXPECT_EQ(honest.get("1"), bytes("rank 1's address"));
}

// Rank 1's key does not make its holder rank 2, nor a rank outside the world: the store says so
// (the client fails at once, naming the rank) and logs it.
TEST(TcpStore, AClientCannotConnectAsAnotherRank) {
  Warnings w;
  TcpStoreServer server("127.0.0.1", 0, kSecret, TcpStoreServer::Limits::for_world(3), w.sink());
  for (int claimed : {2, 0, 3}) {
    const auto t0 = Clock::now();
    try {
      TcpStoreClient c("127.0.0.1", server.port(),
                       SessionKeys::of_rank_key(SessionKeys::rank_key(kSecret, 1), claimed),
                       Clock::now() + 5s);
      FAIL() << "connected as rank " << claimed;
    } catch (const sdk::Error& e) {
      EXPECT_EQ(e.code(), WT_ERR_REMOTE);
      EXPECT_THAT(e.what(), HasSubstr(fmt::format("refused this session: it refused rank {}'s key",
                                                  claimed)));
    }
    EXPECT_LT(Clock::now() - t0, 1s) << "refused at once, not at the deadline";
  }
  EXPECT_THAT(w.all(), HasSubstr("did not prove the key of rank 2"));
  EXPECT_THAT(w.all(), HasSubstr("it connected as rank 3, outside a world of 3"));
}

// A worker gets the keys of its pairs with higher ranks from the store, each wrapped under its own
// key: what it unwraps is what the trainer derives, and no other rank's connection could read it.
TEST(TcpStore, AWorkerLearnsTheKeysOfItsPairsWithHigherRanks) {
  TcpStoreServer server("127.0.0.1", 0, kSecret, TcpStoreServer::Limits::for_world(5));
  SessionKeys mine = worker(2);
  TcpStoreClient c("127.0.0.1", server.port(), mine, Clock::now() + 2s);
  EXPECT_THROW(mine.pair_key_with(3), sdk::Error);
  c.learn_pair_keys(mine, {3, 4});
  for (int peer : {0, 1, 3, 4})
    EXPECT_TRUE(mine.pair_key_with(peer) == trainer(2).pair_key_with(peer)) << "peer " << peer;
  EXPECT_TRUE(worker(3).pair_key_with(2) == mine.pair_key_with(3)) << "both ends hold the same key";
  EXPECT_FALSE(mine.pair_key_with(3) == mine.pair_key_with(4));
  try {  // once per rank: each answer costs the store O(world) MACs
    c.learn_pair_keys(mine, {3, 4});
    FAIL() << "rank 2 was given its pair keys twice";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_REMOTE);
    EXPECT_THAT(e.what(), HasSubstr("gave rank 2 no pair keys (it hands them to each rank once)"));
  }
}

TEST(TcpStore, AKeyThatNeverComesIsATimeoutNamingIt) {
  TcpStoreServer server("127.0.0.1", 0, kSecret, {});
  TcpStoreClient c("127.0.0.1", server.port(), trainer(0), Clock::now() + 5s);
  auto t0 = Clock::now();
  try {
    c.wait({"rank7"}, 300ms);
    FAIL();
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_TIMEOUT);
    EXPECT_THAT(e.what(), HasSubstr("key 'rank7' did not appear within 300 ms"));
  }
  EXPECT_LT(Clock::now() - t0, 2s);
}

// Gloo asks for each key with its own timeout; the rendezvous's one deadline bounds them all.
TEST(TcpStore, EveryWaitEndsByTheClientsOneDeadline) {
  TcpStoreServer server("127.0.0.1", 0, kSecret, {});
  const auto t0 = Clock::now();
  TcpStoreClient c("127.0.0.1", server.port(), trainer(0), t0 + 500ms);
  EXPECT_THROW(c.wait({"a"}, 60s), sdk::Error);
  EXPECT_THROW(c.wait({"b"}, 60s), sdk::Error);
  EXPECT_LT(Clock::now() - t0, 1500ms);
}

TEST(TcpStore, AClientWaitsForAServerThatComesLater) {
  int port = 0;
  { port = TcpStoreServer("127.0.0.1", 0, kSecret, {}).port(); }  // free a moment ago
  std::unique_ptr<TcpStoreServer> server;
  std::thread later([&] {
    std::this_thread::sleep_for(300ms);
    server = std::make_unique<TcpStoreServer>("127.0.0.1", port, kSecret, TcpStoreServer::Limits{});
  });
  TcpStoreClient c("127.0.0.1", port, trainer(0), Clock::now() + 5s);
  later.join();
  c.set("0", bytes("v"));
  EXPECT_EQ(c.get("0"), bytes("v"));
}

TEST(TcpStore, NoServerIsATimeoutNamingTheAddress) {
  int port = 0;
  { port = TcpStoreServer("127.0.0.1", 0, kSecret, {}).port(); }
  try {
    TcpStoreClient c("127.0.0.1", port, trainer(0), Clock::now() + 300ms);
    FAIL();
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_TIMEOUT);
    EXPECT_THAT(e.what(), HasSubstr("cannot reach the rendezvous store at 127.0.0.1:"));
  }
}

// A second job's worker that meets at a port another session's store holds is refused by it and
// says why, instead of joining the other job's rendezvous.
TEST(TcpStore, AClientOfAnotherSessionIsRefusedAndSaysWhy) {
  Warnings w;
  TcpStoreServer server("127.0.0.1", 0, kSecret, quick(), w.sink());
  try {
    TcpStoreClient c("127.0.0.1", server.port(), SessionKeys::of_secret(SessionSecret::mint(), 1),
                     Clock::now() + 5s);
    FAIL();
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_REMOTE);
    EXPECT_THAT(e.what(), HasSubstr("refused this session: it refused rank 1's key: it is another "
                                    "session's store (another job's on this port?)"));
  }
  EXPECT_GE(server.rejected(), 1u);
  EXPECT_THAT(w.all(), HasSubstr("did not prove the key of rank 1"));
}

// What an attacker who knows only the port could do before: register its own address for a rank.
// Without a rank's key, its hello is refused, so its SET never reaches the store; strangers that
// say nothing are dropped at the auth deadline; bytes that name no rank of the world at once.
TEST(TcpStore, StrangersCannotSetKeysAndAreDroppedAndLogged) {
  Warnings w;
  TcpStoreServer server("127.0.0.1", 0, kSecret, quick(), w.sink());
  int forger = raw_connect(server.port());
  std::string hello(16 + 4 + 32, 'x');  // a nonce, rank 1 and a MAC made up
  hello.replace(16, 4, std::string("\x01\x00\x00\x00", 4));
  ASSERT_EQ(::send(forger, hello.data(), hello.size(), 0), static_cast<ssize_t>(hello.size()));
  const std::string key = "1";
  std::string set = std::string(1, '\1') + std::string("\x00\x00\x00\x00", 4) + key;
  set[1] = static_cast<char>(key.size());
  ::send(forger, set.data(), set.size(), MSG_NOSIGNAL);
  int silent = raw_connect(server.port());
  int junk = raw_connect(server.port());
  std::string bad(64, '\xff');
  ::send(junk, bad.data(), bad.size(), 0);
  for (int fd : {forger, silent, junk}) {
    EXPECT_TRUE(closed_by_server(fd));
    ::close(fd);
  }
  TcpStoreClient good("127.0.0.1", server.port(), trainer(0), Clock::now() + 2s);
  EXPECT_THROW(good.wait({"1"}, 200ms), sdk::Error) << "the forged SET was not stored";
  EXPECT_EQ(server.rejected(), 3u);
  EXPECT_THAT(w.all(), HasSubstr("did not authenticate within 300 ms"));
  EXPECT_THAT(w.all(), HasSubstr("it did not prove the key of rank 1"));
}

// The store is bounded as a whole: values larger than 1 MiB are refused at the client, and a
// session's stored bytes end at its limit (the store answers "full"; nothing is kept beyond it).
TEST(TcpStore, TheStoreIsBoundedAsAWhole) {
  auto limits = TcpStoreServer::Limits::for_world(2);  // 384 KiB stored at most
  TcpStoreServer server("127.0.0.1", 0, kSecret, limits);
  TcpStoreClient c("127.0.0.1", server.port(), trainer(0), Clock::now() + 5s);
  EXPECT_THROW(c.set("0", std::vector<char>((std::size_t{1} << 20) + 1)), sdk::Error);
  c.set("0", std::vector<char>(300 << 10, 'v'));
  try {
    c.set("rank_0", std::vector<char>(300 << 10, 'v'));
    FAIL() << "the store took 600 KiB";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_REMOTE);
    EXPECT_THAT(e.what(), HasSubstr("the store is full"));
  }
  EXPECT_THROW(c.wait({"rank_0"}, 100ms), sdk::Error) << "nothing kept beyond the limit";
}

// Idle strangers cannot hold the connection slots: the oldest unauthenticated one makes room.
TEST(TcpStore, IdleStrangersDoNotKeepTheRanksOut) {
  auto limits = TcpStoreServer::Limits::for_world(2);  // 18 connections
  limits.auth_deadline = 60s;                          // they would sit for a minute
  TcpStoreServer server("127.0.0.1", 0, kSecret, limits);
  std::vector<int> idle;
  for (std::size_t i = 0; i < 3 * limits.max_connections; ++i)
    idle.push_back(raw_connect(server.port()));
  std::this_thread::sleep_for(200ms);
  TcpStoreClient a("127.0.0.1", server.port(), trainer(0), Clock::now() + 3s);
  TcpStoreClient b("127.0.0.1", server.port(), worker(1), Clock::now() + 3s);
  a.set("0", bytes("v"));
  EXPECT_EQ(b.get("0"), bytes("v"));
  for (int fd : idle) ::close(fd);
}

// Rank `rank` of a group of `n` meeting at 127.0.0.1:port (a broadcast tree from rank 0).
CommunicatorOptions options(int rank, int n, int port) {
  return test::loopback_rank(kSecret, rank, n, port, 10s);
}

// A group of `n` ranks on threads; each runs `body(group)`; errors come back per rank.
template <typename Body>
std::vector<std::string> on_ranks(int n, int port, Body body,
                                  std::chrono::milliseconds rendezvous = 10s) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      try {
        CommunicatorOptions o = options(r, n, port);
        o.rendezvous_timeout = rendezvous;
        BroadcastGroup g(o);
        body(g);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  return errors;
}

int free_port() {
  return TcpStoreServer("127.0.0.1", 0, kSecret, {}).port();
}

TEST(BroadcastGroup, FormsOnTheStoreProvesTheSecretAndBroadcastsByteExact) {
  std::vector<std::vector<float>> data(4, std::vector<float>(1000, 0.0f));
  for (std::size_t i = 0; i < 1000; ++i) data[0][i] = static_cast<float>(i) * 0.5f;
  auto errors = on_ranks(4, free_port(), [&](BroadcastGroup& g) {
    auto& mine = data[static_cast<std::size_t>(g.rank())];
    g.broadcast(mine.data(), mine.size() * 4, 0, "broadcast of 'w'");
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
    EXPECT_EQ(data[static_cast<std::size_t>(r)], data[0]) << "rank " << r;
  }
}

// Longer or shorter than a receiver expects: that receiver refuses before a byte lands, naming
// the broadcast and both sizes; its memory is as it was.
TEST(BroadcastGroup, ABroadcastOfAnotherLengthIsRefusedBeforeAByteLands) {
  for (std::size_t sent : {std::size_t{1200}, std::size_t{800}}) {
    std::vector<std::vector<unsigned char>> data(2, std::vector<unsigned char>(2000, 7));
    std::fill(data[0].begin(), data[0].end(), 1);
    auto errors = on_ranks(2, free_port(), [&](BroadcastGroup& g) {
      if (g.rank() == 0) {
        try {
          g.broadcast(data[0].data(), sent, 0, "broadcast of 'w'");
        } catch (const sdk::Error&) {  // its receiver left
        }
      } else {
        g.broadcast(data[1].data(), 1000, 0, "broadcast of 'w'");
      }
    });
    EXPECT_THAT(errors[1],
                HasSubstr(fmt::format("broadcast of 'w': the sender broadcast {} bytes, this rank "
                                      "expected 1000; nothing of it was taken",
                                      sent)));
    EXPECT_EQ(data[1], std::vector<unsigned char>(2000, 7));
  }
}

// A peer that holds the store's secret but not the pair proof (here: plain Gloo, which sends its
// own frames where the proof belongs) fails the group at rank 0, naming the rank, before anything
// else is read or sent.
TEST(BroadcastGroup, APeerFailingThePairChallengeFailsTheGroupNamingIt) {
  const int port = free_port();
  std::string error;
  std::thread root([&] {
    try {
      CommunicatorOptions o = options(0, 2, port);
      BroadcastGroup g(o);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  TcpStoreClient store("127.0.0.1", port, worker(1), Clock::now() + 10s);
  gloo::transport::tcp::attr attr("127.0.0.1");
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto pairs = device->createContext(1, 2);
  pairs->setTimeout(10s);
  try {
    // Published and connected as wt's meshes do (gloo_mesh.cpp), on a plain Gloo pair.
    auto& pair = pairs->createPair(0);
    store.set(pair_address_key(1, 0), pair->address().bytes());
    pair->connect(store.get(pair_address_key(0, 1)));
    std::vector<unsigned char> out(48, 0x5a);  // as long as a nonce and an answer
    auto s = pairs->createUnboundBuffer(out.data(), out.size());
    s->send(0, 0);
    s->waitSend(10s);
  } catch (const std::exception&) {  // rank 0 hung up on it
  }
  root.join();
  EXPECT_THAT(error, HasSubstr("the peer connected as rank 1 did not prove the key of its pair "
                               "with rank 0: it is not rank 1"));
}

// A root with three children waits for each send in turn; abort ends every one of those waits.
TEST(BroadcastGroup, AbortEndsEveryWaitOfARootWithThreeChildren) {
  std::vector<unsigned char> data(1 << 20, 3);
  std::atomic<BroadcastGroup*> root{nullptr};
  std::chrono::milliseconds took{0};
  std::atomic<bool> done{false};
  auto errors = on_ranks(4, free_port(), [&](BroadcastGroup& g) {
    if (g.rank() != 0) {  // the children stay, and never post their receives
      while (!done) std::this_thread::sleep_for(10ms);
      return;
    }
    struct Done {
      std::atomic<bool>& d;
      ~Done() { d = true; }
    } mark{done};
    root = &g;
    std::thread aborter([&] {
      std::this_thread::sleep_for(300ms);
      const auto t0 = Clock::now();
      g.abort();
      took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    });
    const auto t0 = Clock::now();
    try {
      g.broadcast(data.data(), data.size(), 0, "broadcast of 'w'");
    } catch (...) {
      aborter.join();
      EXPECT_LT(Clock::now() - t0, 2s) << "the abort ended every wait";
      throw;
    }
    aborter.join();
  });
  EXPECT_THAT(errors[0], HasSubstr("broadcast of 'w': aborted"));
  std::cout << "abort of a root with 3 children returned in " << took.count() << " ms\n";
}

// The receiving process dies while rank 0 writes to it: rank 0's broadcast fails with an error;
// the process is not ended by SIGPIPE (whose default action this test leaves in place).
TEST(BroadcastGroup, APeerThatDiedUnderAWriteIsAnErrorNotSigpipe) {
  ASSERT_EQ(::signal(SIGPIPE, SIG_DFL), SIG_DFL);
  const int port = free_port();
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      CommunicatorOptions o = options(1, 2, port);
      BroadcastGroup g(o);
      std::thread([] {
        std::this_thread::sleep_for(150ms);
        ::_exit(0);  // dies in the middle of receiving
      }).detach();
      std::vector<unsigned char> in(std::size_t{256} << 20);
      g.broadcast(in.data(), in.size(), 0, "broadcast of 'w'");
    } catch (...) {
    }
    ::_exit(0);
  }
  CommunicatorOptions o = options(0, 2, port);
  BroadcastGroup g(o);
  std::vector<unsigned char> data(std::size_t{256} << 20, 1);
  int failures = 0;
  for (int i = 0; i < 3 && failures == 0; ++i) {
    try {
      g.broadcast(data.data(), data.size(), 0, "broadcast of 'w'");
    } catch (const sdk::Error& e) {
      ++failures;
      EXPECT_THAT(e.what(), HasSubstr("broadcast of 'w'"));
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(failures, 1);
}

// Children that joined and then post nothing: no byte moves on any pair, and the root's broadcast
// fails at the stall deadline (0.5 s), far inside the round's own bound (10 s), naming both.
TEST(BroadcastGroup, ABroadcastOnWhichNoByteMovesFailsAtTheStallDeadline) {
  std::vector<unsigned char> data(1 << 20, 3);
  std::atomic<bool> done{false};
  std::chrono::milliseconds took{0};
  const int port = free_port();
  std::vector<std::string> errors(4);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 4; ++r)
    ranks.emplace_back([&, r] {
      try {
        CommunicatorOptions o = options(r, 4, port);
        o.stall_timeout = 500ms;
        BroadcastGroup g(o);
        if (r != 0) {  // the children stay, and never post their receives
          while (!done) std::this_thread::sleep_for(10ms);
          return;
        }
        const auto t0 = Clock::now();
        try {
          g.broadcast(data.data(), data.size(), 0, "broadcast of 'w'");
        } catch (...) {
          took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
          done = true;
          throw;
        }
        done = true;
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  EXPECT_THAT(errors[0], HasSubstr("broadcast of 'w': no byte moved on any of this rank's pairs "
                                   "for 500 ms (stall_timeout_s)"));
  EXPECT_GE(took, 500ms);
  EXPECT_LT(took, 3s);
  std::cout << "a broadcast nobody took failed after " << took.count() << " ms (stall 500 ms)\n";
}

// A receiver that keeps stopping (SIGSTOP for 0.3 s, then 25 ms running, until the broadcast ends)
// is slow, not dead: a broadcast that outlasts the stall deadline (2 s) completes, byte-exact.
// (512 MiB takes a dozen such windows, so the broadcast outlasts the deadline.)
TEST(BroadcastGroup, ASlowReceiverThatKeepsMovingOutlastsTheStallDeadline) {
#ifdef WT_TEST_SANITIZED
  // A sanitizer slows the receiver's 25 ms windows by several times (it then moves too little to
  // tell slow from stalled), and TSan does not follow a forked child's threads.
  GTEST_SKIP() << "timed against real scheduling: not under a sanitizer";
#endif
  const int port = free_port();
  constexpr std::size_t kBytes = std::size_t{512} << 20;
  constexpr auto kStall = 2000ms;
  // Filled before the fork, so neither side has work of its own between the rendezvous and the
  // broadcast: on a loaded machine such work could itself outlast a deadline while the other
  // side waits (a real stall, not what this test shows).
  std::vector<unsigned char> data(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) data[i] = static_cast<unsigned char>(i * 7);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int rc = 1;
    try {
      auto in = std::make_unique_for_overwrite<unsigned char[]>(kBytes);  // pages on first write
      CommunicatorOptions o = options(1, 2, port);
      o.rendezvous_timeout = 60s;
      o.stall_timeout = kStall;
      o.transfer_timeout = 60s;
      BroadcastGroup g(o);
      g.broadcast(in.get(), kBytes, 0, "broadcast of 'w'");
      rc = std::memcmp(in.get(), data.data(), kBytes) == 0 ? 0 : 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "the receiver failed: %s\n", e.what());
    }
    ::_exit(rc);
  }
  std::atomic<bool> sent{false};
  std::atomic<int> stops{0};
  CommunicatorOptions o = options(0, 2, port);
  o.rendezvous_timeout = 60s;
  o.stall_timeout = kStall;
  o.transfer_timeout = 60s;
  BroadcastGroup g(o);
  // Stopped 300 ms, running 25 ms, until the broadcast ends: each stop is far inside the stall
  // deadline, and a process woken after 300 ms asleep is scheduled at once even on a busy machine.
  std::thread stopper([&] {
    while (!sent) {
      ::kill(child, SIGSTOP);
      ++stops;
      std::this_thread::sleep_for(300ms);
      ::kill(child, SIGCONT);
      std::this_thread::sleep_for(25ms);
    }
  });
  std::string error;
  const auto t0 = Clock::now();
  try {
    g.broadcast(data.data(), data.size(), 0, "broadcast of 'w'");
  } catch (const std::exception& e) {
    error = e.what();
  }
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  sent = true;
  stopper.join();
  ::kill(child, SIGCONT);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(error, "");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the receiver's bytes differ";
  EXPECT_GT(took, kStall)
      << "the broadcast did not outlast the stall deadline: the test shows nothing";
  std::cout << "a receiver stopped " << stops.load() << " times took " << took.count()
            << " ms for 512 MiB (stall deadline 2000 ms)\n";
}

}  // namespace
}  // namespace wt::plugins
