// Which pairs of ranks a Gloo mesh connects: only those its backend's traffic uses.
//
// A full mesh of W ranks holds W(W-1)/2 connections, publishes W(W-1) addresses through rank 0's
// store and needs a descriptor per peer on every rank; most of it idles. So each backend names
// its shape, and the mesh connects those pairs and no others (gloo_mesh.hpp):
//
//  - broadcast tree (nccl, sparse_nccl on host memory): Gloo's broadcast from root 0 is a
//    binomial tree in which rank v receives from its parent, v with its highest bit cleared, and
//    sends to its children v + 2^i for every 2^i > v: about log2(W) pairs per rank.
//  - hubs (m2n): ranks 0..hubs-1 (the trainer ranks) pair with every rank; the others (the
//    workers) only with the hubs, never with each other: M(M-1)/2 + M*N pairs for M trainer ranks
//    and N workers (at 256 x 128, 65,408 pairs instead of 73,536).
//  - full: every pair (the trainer group's all-gathers and barriers).
//
// Every shape is connected along a tree rooted at rank 0 (parent()), which is what the mesh's
// formation barrier runs on. Header-only, compiled into each plugin that forms a mesh.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace wt::plugins {

class MeshPairs {
 public:
  static MeshPairs broadcast_tree() { return MeshPairs(Kind::tree, 0); }
  static MeshPairs hubs(int hub_ranks) { return MeshPairs(Kind::hubs, hub_ranks); }
  static MeshPairs full() { return MeshPairs(Kind::full, 0); }

  // Whether ranks a and b (distinct, both in the world) hold a pair.
  bool connects(int a, int b) const {
    if (a == b) return false;
    switch (kind_) {
      case Kind::tree:
        return parent(a) == b || parent(b) == a;
      case Kind::hubs:
        return a < hubs_ || b < hubs_;
      case Kind::full:
        return true;
    }
    return false;
  }

  // The peers of `rank` in a world of `world` ranks, in increasing order.
  std::vector<int> peers(int rank, int world) const {
    std::vector<int> out;
    switch (kind_) {
      case Kind::tree:
        if (rank > 0) out.push_back(parent(rank));
        for (int bit = 1; bit > 0 && bit < world; bit <<= 1)
          if (bit > rank && rank + bit < world) out.push_back(rank + bit);
        break;
      case Kind::hubs:
        for (int p = 0; p < world; ++p)
          if (p != rank && (rank < hubs_ || p < hubs_)) out.push_back(p);
        break;
      case Kind::full:
        for (int p = 0; p < world; ++p)
          if (p != rank) out.push_back(p);
        break;
    }
    return out;
  }

  // The peers of `rank` above it: the pairs whose keys a worker is handed rather than derives.
  std::vector<int> higher_peers(int rank, int world) const {
    std::vector<int> out = peers(rank, world);
    out.erase(out.begin(), std::upper_bound(out.begin(), out.end(), rank));
    return out;
  }

  // The pairs of a world of `world` ranks.
  uint64_t pair_count(int world) const {
    const auto w = static_cast<uint64_t>(world > 0 ? world : 0);
    switch (kind_) {
      case Kind::tree:
        return w > 0 ? w - 1 : 0;
      case Kind::hubs: {
        const uint64_t m = std::min<uint64_t>(static_cast<uint64_t>(hubs_), w);
        return m * (m > 0 ? m - 1 : 0) / 2 + m * (w - m);
      }
      case Kind::full:
        return w * (w > 0 ? w - 1 : 0) / 2;
    }
    return 0;
  }

  // The rank above `rank` on the tree the formation barrier runs on (-1 for rank 0): in the
  // broadcast tree its parent there, elsewhere rank 0, which pairs with every rank.
  int parent(int rank) const {
    if (rank <= 0) return -1;
    if (kind_ != Kind::tree) return 0;
    return rank & ~static_cast<int>(std::bit_floor(static_cast<unsigned>(rank)));
  }

  // Only rank 0 can be a broadcast's root in a tree (every rank's parent lies towards it).
  bool allows_root(int root) const { return kind_ != Kind::tree || root == 0; }

  // For messages: "a broadcast tree", "a mesh of 4 hub ranks", "a full mesh".
  std::string describe() const {
    switch (kind_) {
      case Kind::tree:
        return "a broadcast tree";
      case Kind::hubs:
        return fmt::format("a mesh of {} hub rank(s) and their workers", hubs_);
      case Kind::full:
        return "a full mesh";
    }
    return "a mesh";
  }

 private:
  enum class Kind { tree, hubs, full };
  MeshPairs(Kind k, int hubs) : kind_(k), hubs_(hubs) {}
  Kind kind_;
  int hubs_;
};

}  // namespace wt::plugins
