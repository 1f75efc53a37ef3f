#include "round_digests.hpp"

#include "session_secret.hpp"

#include <wt/sdk/base64.hpp>
#include <wt/sdk/errors.hpp>
#include <wt/sdk/json_fields.hpp>
#include <wt/sdk/parallel_for.hpp>

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <future>

namespace wt::plugins {

using sdk::fail;

uint64_t digest_seed(const std::string& session_secret_hex) {
  const Mac m =
      SessionSecret::from_hex(session_secret_hex, "session_secret").mac("wt round digests", "");
  uint64_t seed = 0;
  std::memcpy(&seed, m.data(), sizeof seed);
  return seed;
}

std::string seed_hex(uint64_t seed) {
  return fmt::format("{:016x}", seed);
}

uint64_t seed_from_hex(const std::string& hex, const std::string& what) {
  const bool ok =
      hex.size() == 16 && hex.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!ok)
    sdk::fail_field(kRoundDigestsSeedKey, WT_ERR_INVALID_ARGUMENT,
                    "invalid {}: field '{}' must be 16 lowercase hex digits", what,
                    kRoundDigestsSeedKey);
  return std::stoull(hex, nullptr, 16);
}

Digest digest_of(const void* data, std::size_t bytes, uint64_t seed, unsigned threads) {
  auto canonical = [](XXH128_hash_t h) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    Digest d;
    std::memcpy(d.data(), c.digest, d.size());
    return d;
  };
  if (bytes <= kDigestBlockBytes) return canonical(XXH3_128bits_withSeed(data, bytes, seed));
  // Large broadcasts: the digest of the blocks' digests, so that blocks hash on several threads.
  const std::size_t blocks = (bytes + kDigestBlockBytes - 1) / kDigestBlockBytes;
  std::vector<Digest> parts(blocks);
  const auto* p = static_cast<const unsigned char*>(data);
  parallel_for(blocks, threads, [&](std::size_t i) {
    const std::size_t at = i * kDigestBlockBytes;
    parts[i] =
        canonical(XXH3_128bits_withSeed(p + at, std::min(kDigestBlockBytes, bytes - at), seed));
  });
  return canonical(XXH3_128bits_withSeed(parts.data(), blocks * sizeof(Digest), seed + bytes));
}

void DigestedDomain::broadcast(void* data, std::size_t bytes, DLDataType dtype, int root,
                               const std::string& what) {
  BroadcastDigest d;
  d.what = what;
  if (root_) {
    // What is sent, hashed while it goes: the bytes do not change during the broadcast, and the
    // future's end waits for the hash whatever the broadcast does.
    auto hashed = std::async(std::launch::async,
                             [&] { return digest_of(data, bytes, seed_, kDigestThreads); });
    inner_->broadcast(data, bytes, dtype, root, what);
    d.digest = hashed.get();
  } else {
    inner_->broadcast(data, bytes, dtype, root, what);
    d.digest = digest_of(data, bytes, seed_, kDigestThreads);  // what arrived
  }
  std::lock_guard<std::mutex> l(mu_);
  digests_.push_back(std::move(d));
}

void DigestedDomain::broadcast_then(void* data, std::size_t bytes, DLDataType dtype, int root,
                                    const std::string& what, std::function<void()> settled) {
  if (root_) {  // the root's digest already runs beside its send
    broadcast(data, bytes, dtype, root, what);
    settled();
    return;
  }
  inner_->broadcast(data, bytes, dtype, root, what);
  // What arrived, hashed while the caller receives the next broadcast; its slot in digests_ keeps
  // the broadcast order, and `settled` hands the bytes back once they are read.
  std::lock_guard<std::mutex> l(mu_);
  const std::size_t at = digests_.size();
  digests_.push_back({{}, what});
  std::erase_if(hashing_, [](const std::future<void>& f) {
    return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
  hashing_.reserve(hashing_.size() + 1);  // so that pushing the future cannot throw
  hashing_.push_back(std::async(std::launch::async, [this, data, bytes, at,
                                                     settled = std::move(settled)] {
    // Settled whatever happens (the caller's pipeline waits for it); a digest that could not be
    // computed stays zero, and the round is refused at verification, saying why.
    try {
      const Digest d = digest_of(data, bytes, seed_, kDigestThreads);
      std::lock_guard<std::mutex> g(mu_);
      digests_[at].digest = d;
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> g(mu_);
      digests_[at].what += fmt::format(" (whose digest this rank could not compute: {})", e.what());
    }
    settled();
  }));
}

std::unique_lock<std::mutex> DigestedDomain::settle_all() {
  // Until no digest is being computed: each is pushed with its entry in digests_, under mu_, so
  // the entries are then complete and none is written to after this returns (the lock is held).
  for (;;) {
    std::unique_lock<std::mutex> l(mu_);
    if (hashing_.empty()) return l;
    std::vector<std::future<void>> hashing;
    hashing.swap(hashing_);
    l.unlock();
    for (auto& f : hashing) f.get();
  }
}

DigestedDomain::~DigestedDomain() {
  settle_all();
}

std::vector<BroadcastDigest> DigestedDomain::take_digests() {
  auto l = settle_all();
  return std::exchange(digests_, {});
}

std::string verification_payload(const std::vector<BroadcastDigest>& digests) {
  std::string bytes;
  bytes.reserve(digests.size() * sizeof(Digest));
  for (const auto& d : digests)
    bytes.append(reinterpret_cast<const char*>(d.digest.data()), d.digest.size());
  return nlohmann::json{{kRoundDigestsKey, sdk::base64_encode(bytes.data(), bytes.size())}}.dump();
}

void RoundVerifier::begin(Communicator& domain) {
  verified_ = false;
  domain.take_digests();  // what an earlier, failed round left
}

bool RoundVerifier::is_verification(const nlohmann::json& update_info) {
  return update_info.is_object() && update_info.contains(kRoundDigestsKey);
}

void RoundVerifier::verify(Communicator& domain, const nlohmann::json& update_info) {
  const std::string what = "the round's digests (update_info)";
  sdk::FieldReader r(update_info, what);
  const std::string sent = sdk::base64_decode(r.get_string(kRoundDigestsKey), kRoundDigestsKey);
  r.finish();
  if (!expected_)
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid {}: this worker was not initialised for round digests (its init info has no "
         "'{}')",
         what, kRoundDigestsKey);
  if (verified_) fail(WT_ERR_STATE, "the round's digests arrived twice");
  if (sent.size() % sizeof(Digest) != 0)
    fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: {} bytes is not a whole number of {}-byte digests",
         what, sent.size(), sizeof(Digest));
  const std::vector<BroadcastDigest> got = domain.take_digests();
  const std::size_t n = sent.size() / sizeof(Digest);
  for (std::size_t i = 0; i < std::min(n, got.size()); ++i)
    if (std::memcmp(sent.data() + i * sizeof(Digest), got[i].digest.data(), sizeof(Digest)) != 0)
      fail(WT_ERR_REMOTE,
           "the bytes of the {} differ from what the trainer sent (digest {} of {} does not "
           "match): a peer on the data plane altered them; the round is refused and nothing of it "
           "is committed",
           got[i].what, i + 1, n);
  if (n != got.size())
    fail(WT_ERR_REMOTE,
         "the trainer sent {} broadcast(s) this round, {} arrived here{}: the round is refused and "
         "nothing of it is committed",
         n, got.size(),
         got.size() > n ? " (the first extra: the " + got[n].what + ")" : std::string());
  verified_ = true;
}

void RoundVerifier::check_finish() const {
  if (expected_ && !verified_)
    fail(WT_ERR_REMOTE,
         "the round's digests never arrived (the trainer sends them in an update_weights call "
         "after the data): the round is refused and nothing of it is committed");
}

}  // namespace wt::plugins
