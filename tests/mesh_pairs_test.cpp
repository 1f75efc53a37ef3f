// Meshes of chosen pairs (mesh_pairs.hpp, gloo_mesh.hpp): each shape connects exactly the pairs
// its backend's traffic uses, forms through the authenticated store, and carries bytes on them.
#include "mesh_pairs.hpp"

#include "broadcast_group.hpp"
#include "gloo_mesh.hpp"
#include "session_keys.hpp"
#include "session_secret.hpp"
#include "tcp_store.hpp"

#include <wt/sdk/errors.hpp>

#include <gloo/transport/unbound_buffer.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "support/free_port.hpp"
#include "support/loopback_rank.hpp"

using ::testing::HasSubstr;
using namespace std::chrono_literals;

namespace wt::plugins {
namespace {

using Clock = std::chrono::steady_clock;

const SessionSecret kSecret = SessionSecret::mint();

// Gloo's broadcast from root 0 (gloo/broadcast.cc): at step i, the ranks v < 2^i send to v + 2^i.
std::set<std::pair<int, int>> gloo_broadcast_edges(int world) {
  std::set<std::pair<int, int>> edges;
  for (int bit = 1; bit < world; bit <<= 1)
    for (int v = 0; v < bit && v + bit < world; ++v) edges.insert({v, v + bit});
  return edges;
}

TEST(MeshPairs, TheBroadcastTreeConnectsExactlyThePairsGlooBroadcastFromRankZeroUses) {
  for (int world : {2, 3, 4, 5, 7, 8, 9, 64, 65, 100, 1000}) {
    const auto shape = MeshPairs::broadcast_tree();
    std::set<std::pair<int, int>> edges;
    for (int r = 0; r < world; ++r)
      for (int p : shape.peers(r, world)) {
        EXPECT_TRUE(shape.connects(r, p)) << r << "-" << p;
        edges.insert({std::min(r, p), std::max(r, p)});
      }
    EXPECT_EQ(edges, gloo_broadcast_edges(world)) << "world " << world;
    EXPECT_EQ(shape.pair_count(world), edges.size()) << "world " << world;
    for (int r = 1; r < world; ++r) {
      const int up = shape.parent(r);
      EXPECT_TRUE(edges.count({up, r})) << "the barrier runs on the tree's own pairs, rank " << r;
      EXPECT_LT(up, r);
    }
  }
  EXPECT_EQ(MeshPairs::broadcast_tree().peers(0, 65536).size(), 16u);
  EXPECT_TRUE(MeshPairs::broadcast_tree().allows_root(0));
  EXPECT_FALSE(MeshPairs::broadcast_tree().allows_root(1));
}

TEST(MeshPairs, HubsPairWithEveryRankAndWorkersOnlyWithHubs) {
  const auto shape = MeshPairs::hubs(3);
  const int world = 3 + 5;
  EXPECT_EQ(shape.peers(0, world), (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(shape.peers(2, world), (std::vector<int>{0, 1, 3, 4, 5, 6, 7}));
  EXPECT_EQ(shape.peers(5, world), (std::vector<int>{0, 1, 2}));
  EXPECT_FALSE(shape.connects(4, 5));
  EXPECT_TRUE(shape.connects(5, 1));
  EXPECT_EQ(shape.pair_count(world), 3u + 3u * 5u);
  // The 1 T layout's 256 trainer ranks into 16 x TP 8: 65,408 pairs against a full mesh's 73,536.
  EXPECT_EQ(MeshPairs::hubs(256).pair_count(384), 65408u);
  EXPECT_EQ(MeshPairs::full().pair_count(384), 73536u);
  for (int r = 1; r < world; ++r) EXPECT_EQ(shape.parent(r), 0);
}

TEST(MeshPairs, APairAddressKeyIsSetOnlyByTheRankItNamesForAPeerInTheWorld) {
  TcpStoreServer server("127.0.0.1", 0, kSecret,
                        TcpStoreServer::Limits::for_mesh(4, MeshPairs::full()));
  const auto until = Clock::now() + 5s;
  TcpStoreClient one("127.0.0.1", server.port(),
                     SessionKeys::of_rank_key(SessionKeys::rank_key(kSecret, 1), 1), until);
  one.set(pair_address_key(1, 3), {'a'});
  EXPECT_EQ(one.get(pair_address_key(1, 3)), std::vector<char>{'a'});
  for (const std::string& key :
       {pair_address_key(2, 3), std::string("pair_1_4"), std::string("pair_1_1"),
        std::string("pair_1_03"), std::string("pair_1_"), std::string("pair_1_x")}) {
    try {
      one.set(key, {'b'});
      ADD_FAILURE() << "rank 1 set '" << key << "'";
    } catch (const sdk::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(key)) << key;
    }
  }
}

// In a tree, a rank sets only the addresses of its own pairs there, each no longer than a Gloo
// address, and is handed the keys of its pairs with its children only (rank 2 of 8: rank 6).
TEST(MeshPairs, InATreeARankPublishesAndLearnsOnlyItsOwnPairs) {
  TcpStoreServer server("127.0.0.1", 0, kSecret,
                        TcpStoreServer::Limits::for_mesh(8, MeshPairs::broadcast_tree()));
  SessionKeys two = SessionKeys::of_rank_key(SessionKeys::rank_key(kSecret, 2), 2);
  TcpStoreClient c("127.0.0.1", server.port(), two, Clock::now() + 5s);
  EXPECT_EQ(MeshPairs::broadcast_tree().peers(2, 8), (std::vector<int>{0, 6}));
  c.set(pair_address_key(2, 0), std::vector<char>(192, 'a'));
  for (const auto& [key, bytes] : std::vector<std::pair<std::string, std::size_t>>{
           {pair_address_key(2, 3), 16}, {pair_address_key(2, 6), 193}}) {
    try {
      c.set(key, std::vector<char>(bytes, 'b'));
      ADD_FAILURE() << "rank 2 set '" << key << "' (" << bytes << " bytes)";
    } catch (const sdk::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("may not set key '" + key + "'"));
    }
  }
  c.learn_pair_keys(two, {6});
  EXPECT_TRUE(two.pair_key_with(6) == SessionKeys::of_secret(kSecret, 2).pair_key_with(6));
  EXPECT_THROW(two.pair_key_with(3), sdk::Error) << "no pair with rank 3 in the tree";
}

// Rank `rank` of a mesh of `world` ranks of `shape` meeting at 127.0.0.1:port.
CommunicatorOptions rank_options(int rank, int world, int port, const MeshPairs& shape) {
  return test::loopback_rank(kSecret, rank, world, port, 60s, shape);
}

// Forms one mesh of `world` ranks of `shape` on threads; returns each rank's context (null where
// forming failed, with the error in `errors`).
std::vector<std::shared_ptr<gloo::rendezvous::Context>> form(int world, const MeshPairs& shape,
                                                             std::vector<std::string>& errors) {
  const int port = test::free_port();
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> meshes(static_cast<std::size_t>(world));
  errors.assign(static_cast<std::size_t>(world), "");
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        meshes[static_cast<std::size_t>(r)] =
            form_gloo_mesh(rank_options(r, world, port, shape), nullptr);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  return meshes;
}

// 4 trainer ranks and 60 workers, as m2n meets: every trainer rank sends each worker its own
// bytes, which arrive exactly; no worker holds a pair with another worker.
TEST(GlooMesh, AHubMeshOfSixtyFourRanksFormsWithTheTrainerWorkerPairsOnly) {
  constexpr int kHubs = 4, kWorld = 64;
  const auto shape = MeshPairs::hubs(kHubs);
  std::vector<std::string> errors;
  const auto t0 = Clock::now();
  auto meshes = form(kWorld, shape, errors);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  for (int r = 0; r < kWorld; ++r) ASSERT_EQ(errors[static_cast<std::size_t>(r)], "") << r;
  std::size_t pairs = 0;
  for (int r = 0; r < kWorld; ++r)
    for (int p = 0; p < kWorld; ++p)
      if (p != r) {
        const bool held = meshes[static_cast<std::size_t>(r)]->getPair(p) != nullptr;
        EXPECT_EQ(held, shape.connects(r, p)) << r << "-" << p;
        pairs += held ? 1 : 0;
      }
  EXPECT_EQ(pairs / 2, shape.pair_count(kWorld));
  std::cout << "a hub mesh of " << kHubs << " + " << kWorld - kHubs << " ranks formed in "
            << took.count() << " ms: " << pairs / 2
            << " pairs (a full mesh: " << MeshPairs::full().pair_count(kWorld) << ")\n";
  // Every trainer rank sends each worker 4 bytes naming both; every worker checks all of them.
  std::vector<std::thread> ranks;
  std::vector<std::string> wrong(kWorld);
  for (int r = 0; r < kWorld; ++r)
    ranks.emplace_back([&, r] {
      auto& mesh = *meshes[static_cast<std::size_t>(r)];
      try {
        if (r < kHubs) {
          std::vector<unsigned char> out;
          for (int w = kHubs; w < kWorld; ++w)
            out.insert(out.end(),
                       {static_cast<unsigned char>(r), static_cast<unsigned char>(w), 0xA5, 0x5A});
          auto buf = mesh.createUnboundBuffer(out.data(), out.size());
          for (int w = kHubs; w < kWorld; ++w)
            buf->send(w, 7, static_cast<std::size_t>(w - kHubs) * 4, 4);
          for (int w = kHubs; w < kWorld; ++w) buf->waitSend(10s);
        } else {
          std::vector<unsigned char> in(kHubs * 4, 0);
          auto buf = mesh.createUnboundBuffer(in.data(), in.size());
          for (int t = 0; t < kHubs; ++t) buf->recv(t, 7, static_cast<std::size_t>(t) * 4, 4);
          for (int t = 0; t < kHubs; ++t) buf->waitRecv(10s);
          for (int t = 0; t < kHubs; ++t)
            if (in[t * 4] != t || in[t * 4 + 1] != r || in[t * 4 + 2] != 0xA5 ||
                in[t * 4 + 3] != 0x5A)
              wrong[static_cast<std::size_t>(r)] = "from trainer rank " + std::to_string(t);
        }
      } catch (const std::exception& e) {
        wrong[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(wrong[static_cast<std::size_t>(r)], "") << r;
}

// A broadcast group of 33 ranks forms on its tree (32 pairs, not 528) and broadcasts exactly; a
// broadcast from another root is refused, naming the shape.
TEST(GlooMesh, ABroadcastTreeOfThirtyThreeRanksCarriesEveryByte) {
  constexpr int kWorld = 33;
  const int port = test::free_port();
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r)
    ranks.emplace_back([&, r] {
      try {
        BroadcastGroup g(rank_options(r, kWorld, port, MeshPairs::broadcast_tree()));
        std::vector<unsigned char> data(1 << 20);
        if (r == 0)
          for (std::size_t i = 0; i < data.size(); ++i)
            data[i] = static_cast<unsigned char>(i * 13);
        g.broadcast(data.data(), data.size(), 0, "broadcast of 'w'");
        for (std::size_t i = 0; i < data.size(); ++i)
          if (data[i] != static_cast<unsigned char>(i * 13)) {
            errors[static_cast<std::size_t>(r)] = "byte " + std::to_string(i) + " differs";
            break;
          }
        if (r == 5) {
          try {
            g.broadcast(data.data(), data.size(), 5, "broadcast of 'x'");
            errors[5] = "a broadcast from rank 5 was taken";
          } catch (const sdk::Error& e) {
            if (std::string(e.what()).find("a broadcast from rank 5 on a broadcast tree") ==
                std::string::npos)
              errors[5] = e.what();
          }
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << r;
}

}  // namespace
}  // namespace wt::plugins
