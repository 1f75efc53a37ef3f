// Bytes verified end to end, before commit: the broadcast domains of nccl and sparse_nccl on host
// memory (compiled into each, plugins/common).
//
// Why: Gloo's broadcast is a tree, so one receiver relays what another receives. Proving each
// pair's key proves who a rank is (session_keys.hpp), not that it is honest: a relaying member
// could alter or cut what it forwards. So the sender digests every broadcast as it sends it, each
// receiver digests what arrived, and after the data the sender delivers its digests on the control
// plane (a second update_weights call, which reaches each receiver over its own authenticated HTTP
// connection, never through a peer). A receiver refuses the round before commit, naming the
// broadcast (the tensor), if a digest differs or is missing; it also refuses to finish a round
// whose digests never came.
//
// The digest is XXH3-128 under a seed derived from the session secret (a tree of 4 MiB blocks for
// large broadcasts, digest_of): it is meant to catch any relay's change of the bytes, not to resist
// a member who deliberately searches for an XXH3 collision under the seed it also holds (XXH3 is
// not a cryptographic hash; docs/security.md says so).
//
// Wire (host memory only; CUDA rounds keep vLLM's keys): the worker init info says
// "round_digests": "xxh3-128" and "round_digests_seed": 16 hex digits; the verification payload is
// {"round_digests": "<base64>"}, 16 bytes per broadcast of the round, in broadcast order.
#pragma once

#include "communicator.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace wt::plugins {

// The init info field's key and its one value; also the verification payload's key.
inline constexpr char kRoundDigestsKey[] = "round_digests";
inline constexpr char kRoundDigestsAlgorithm[] = "xxh3-128";

using Digest = std::array<unsigned char, 16>;  // BroadcastDigest::digest

// The seed the sender derives from the session secret (hex) and ships to every worker in the
// init info's kRoundDigestsSeedKey, as 16 hex digits (seed_hex); a worker reads it with
// seed_from_hex, errors naming the field of `what`.
inline constexpr char kRoundDigestsSeedKey[] = "round_digests_seed";
uint64_t digest_seed(const std::string& session_secret_hex);
std::string seed_hex(uint64_t seed);
uint64_t seed_from_hex(const std::string& hex, const std::string& what);

// XXH3-128 of `bytes` under `seed`; above kDigestBlockBytes, XXH3-128 (seed + bytes) of the
// XXH3-128 digests of its 4 MiB blocks (canonical byte order), hashed on up to `threads` threads.
inline constexpr std::size_t kDigestBlockBytes = std::size_t{4} << 20;
inline constexpr unsigned kDigestThreads = 2;
Digest digest_of(const void* data, std::size_t bytes, uint64_t seed, unsigned threads = 1);

// A broadcast domain that digests each broadcast: the root while it sends, every other rank after
// its bytes arrived (broadcast_then: on a thread of its own, while the caller's next broadcast
// runs). Everything else is the wrapped domain's.
class DigestedDomain final : public Communicator {
 public:
  DigestedDomain(std::unique_ptr<Communicator> inner, bool root, uint64_t seed)
      : inner_(std::move(inner)), root_(root), seed_(seed) {}
  ~DigestedDomain() override;  // waits for the digests still being computed

  void broadcast(void* data, std::size_t bytes, DLDataType dtype, int root,
                 const std::string& what) override;
  void broadcast_then(void* data, std::size_t bytes, DLDataType dtype, int root,
                      const std::string& what, std::function<void()> settled) override;
  void abort() override { inner_->abort(); }
  bool broken() const override { return inner_->broken(); }
  void* stream() const override { return inner_->stream(); }
  bool peers_see_it_close() const override { return inner_->peers_see_it_close(); }
  std::vector<BroadcastDigest> take_digests() override;
  bool digests() const override { return true; }

 private:
  std::unique_ptr<Communicator> inner_;
  const bool root_;
  const uint64_t seed_;
  // Broadcasts run on a pipeline's thread, receivers' digests on threads of their own, and digests
  // are taken on the caller's.
  std::mutex mu_;
  std::vector<BroadcastDigest> digests_;
  std::vector<std::future<void>> hashing_;  // receivers' digests being computed into digests_
  // Waits for every digest being computed; returns holding mu_.
  std::unique_lock<std::mutex> settle_all();
};

// The verification payload for `digests` (the sender's, in broadcast order).
std::string verification_payload(const std::vector<BroadcastDigest>& digests);
// The sender's: the payload of what `domain` broadcast since the last call, or "" when it does not
// digest (RoundBracket::run's `verification`).
inline std::string round_verification(Communicator* domain) {
  return domain != nullptr && domain->digests() ? verification_payload(domain->take_digests())
                                                : std::string();
}

// A worker's side of the verification, round by round. The engine calls begin() at start,
// is_verification() on each update payload, verify() on that one, and check_finish() at finish.
class RoundVerifier {
 public:
  // `expected`: the init info asked for digests (host memory, wt 0.3 senders).
  explicit RoundVerifier(bool expected = false) : expected_(expected) {}
  bool expected() const { return expected_; }

  void begin(Communicator& domain);
  static bool is_verification(const nlohmann::json& update_info);
  // Throws sdk::Error WT_ERR_REMOTE naming the first broadcast whose bytes differ, or the count
  // when broadcasts are missing or extra; WT_ERR_INVALID_ARGUMENT for a malformed payload.
  void verify(Communicator& domain, const nlohmann::json& update_info);
  // Throws sdk::Error WT_ERR_REMOTE when digests were expected and never verified this round.
  void check_finish() const;

 private:
  bool expected_;
  bool verified_ = false;
};

}  // namespace wt::plugins
