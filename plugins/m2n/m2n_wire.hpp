// What goes on a (trainer rank, worker rank) pair each round: first a frame (magic, round number,
// pieces, bytes, the digest of the pair's schedule), then the pair's messages (its pieces in
// schedule order, small ones coalesced: messages_of), message n on slot slot(round, n). A worker
// whose frame disagrees with what its plan expects takes none of the round's bytes.
#pragma once

#include "../common/gloo_mesh.hpp"

#include <array>
#include <cstdint>
#include <cstring>

namespace wt::m2n {

constexpr std::size_t kFrameBytes = 32;
using Frame = std::array<unsigned char, kFrameBytes>;
// Wire 2 (m2n 0.2): a pair's pieces travel as messages (messages_of); wire 1 sent one per piece.
// The worker init info says which ("wire"): a worker that speaks another refuses at init.
constexpr int kWire = 2;
constexpr unsigned char kFrameMagic[4] = {'W', 'T', 'M', '2'};

inline Frame make_frame(uint32_t round, uint64_t pieces, uint64_t bytes, uint64_t digest) {
  Frame f{};
  std::memcpy(f.data(), kFrameMagic, 4);
  plugins::put_le(f.data() + 4, round, 4);
  plugins::put_le(f.data() + 8, pieces, 8);
  plugins::put_le(f.data() + 16, bytes, 8);
  plugins::put_le(f.data() + 24, digest, 8);
  return f;
}

// Slots of m2n's messages: apart from the ones Gloo's own collectives take (small numbers).
inline uint64_t slot(uint32_t round, uint64_t message) {
  return (uint64_t{1} << 62) | (uint64_t{round & 0xfffffu} << 40) |
         (message & ((uint64_t{1} << 40) - 1));
}

}  // namespace wt::m2n
