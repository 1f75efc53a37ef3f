// The rendezvous store of the nccl backends (plugins/common/tcp_store): values across clients,
// deadlines, a client that comes before its server, hostile peers, and a Gloo group formed on it.
#include "tcp_store.hpp"

#include <wt/sdk/errors.hpp>

#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

using ::testing::HasSubstr;
using namespace std::chrono_literals;

namespace wt::plugins {
namespace {

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

TEST(TcpStore, ValuesSetByOneClientAreSeenByAnother) {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStoreClient a("127.0.0.1", server.port(), 2s), b("127.0.0.1", server.port(), 2s);
  a.set("rank0", bytes("address of rank 0"));
  b.wait({"rank0"});
  EXPECT_EQ(b.get("rank0"), bytes("address of rank 0"));
  a.set("rank0", bytes(""));  // overwritten, and empty values are values
  EXPECT_EQ(b.get("rank0"), bytes(""));
}

TEST(TcpStore, AKeyThatNeverComesIsATimeoutNamingIt) {
  TcpStoreServer server("127.0.0.1", 0);
  TcpStoreClient c("127.0.0.1", server.port(), 2s);
  auto t0 = std::chrono::steady_clock::now();
  try {
    c.wait({"rank7"}, 300ms);
    FAIL();
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_TIMEOUT);
    EXPECT_THAT(e.what(), HasSubstr("key 'rank7' did not appear within 300 ms"));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST(TcpStore, AClientWaitsForAServerThatComesLater) {
  int port = 0;
  { port = TcpStoreServer("127.0.0.1", 0).port(); }  // a port that was free a moment ago
  std::unique_ptr<TcpStoreServer> server;
  std::thread later([&] {
    std::this_thread::sleep_for(300ms);
    server = std::make_unique<TcpStoreServer>("127.0.0.1", port);
  });
  TcpStoreClient c("127.0.0.1", port, 5s);
  later.join();
  c.set("k", bytes("v"));
  EXPECT_EQ(c.get("k"), bytes("v"));
}

TEST(TcpStore, NoServerIsATimeoutNamingTheAddress) {
  int port = 0;
  { port = TcpStoreServer("127.0.0.1", 0).port(); }
  try {
    TcpStoreClient c("127.0.0.1", port, 300ms);
    FAIL();
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_TIMEOUT);
    EXPECT_THAT(e.what(), HasSubstr("cannot reach the rendezvous store at 127.0.0.1:"));
  }
}

TEST(TcpStore, HostilePeersAreDroppedAndOthersStillServed) {
  TcpStoreServer::Limits limits;
  limits.request_deadline = 200ms;
  TcpStoreServer server("127.0.0.1", 0, limits);
  // A key length of 4 GiB.
  int huge = raw_connect(server.port());
  const unsigned char req[] = {2, 0xff, 0xff, 0xff, 0xff};
  ASSERT_EQ(::send(huge, req, sizeof req, 0), static_cast<ssize_t>(sizeof req));
  // One byte, then nothing.
  int slow = raw_connect(server.port());
  ASSERT_EQ(::send(slow, req, 1, 0), 1);
  // An unknown op.
  int junk = raw_connect(server.port());
  ASSERT_EQ(::send(junk, "\x09\0\0\0\0", 5, 0), 5);
  TcpStoreClient good("127.0.0.1", server.port(), 2s);
  good.set("k", bytes("v"));
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(good.get("k"), bytes("v"));
  EXPECT_EQ(server.connections_dropped(), 3u);
  char c;
  for (int fd : {huge, slow, junk}) {
    EXPECT_EQ(::recv(fd, &c, 1, 0), 0) << "the server closed it";
    ::close(fd);
  }
}

// Three Gloo ranks form a full mesh on the store and broadcast from rank 0.
TEST(TcpStore, AGlooGroupFormsOnItAndBroadcasts) {
  TcpStoreServer server("127.0.0.1", 0);
  std::vector<std::vector<float>> data(3, std::vector<float>(1000, 0.0f));
  for (std::size_t i = 0; i < 1000; ++i) data[0][i] = static_cast<float>(i) * 0.5f;
  std::vector<std::thread> ranks;
  std::vector<std::string> errors(3);
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      try {
        TcpStoreClient store("127.0.0.1", server.port(), 10s);
        gloo::transport::tcp::attr attr("127.0.0.1");
        auto device = gloo::transport::tcp::CreateDevice(attr);
        auto context = std::make_shared<gloo::rendezvous::Context>(r, 3);
        context->setTimeout(10s);
        context->connectFullMesh(store, device);
        gloo::BroadcastOptions o(context);
        o.setOutput(data[static_cast<std::size_t>(r)].data(), 1000);
        o.setRoot(0);
        o.setTimeout(10s);
        gloo::broadcast(o);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
    EXPECT_EQ(data[static_cast<std::size_t>(r)], data[0]) << "rank " << r;
  }
}

}  // namespace
}  // namespace wt::plugins
