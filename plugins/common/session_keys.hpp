// Who a rank is in a host-memory session, by the keys it holds: identities on the data plane.
//
// The sender mints the session secret (session_secret.hpp); trainer ranks hold it. Every other
// key derives from it:
//   rank key  K(r)    = HMAC(secret, "wt rank key" | r)         one per mesh rank
//   pair key  P(a, b) = HMAC(K(b), "wt pair key" | a), a < b    one per pair of ranks
// A worker is given only its own rank key, in its own init info (init info field `rank_keys`,
// which the fan-out client and the receiver group split per rank). With it, it proves to the
// store that it is rank r (and may set only rank r's keys, tcp_store.hpp), and it derives the pair
// keys of every pair it is the higher rank of. The pair keys of the pairs it is the lower rank of
// it fetches from the store, wrapped under its own key. A pair proves on its socket that each side
// holds that pair's key (proving_device.hpp): only the two ranks of a pair and the trainer can,
// so a worker can act as itself only, never as another rank.
#pragma once

#include "session_secret.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace wt::plugins {

class SessionKeys {
 public:
  // A trainer rank (it holds the secret and derives every key).
  static SessionKeys of_secret(const SessionSecret& secret, int rank);
  // A worker rank, holding `rank_key` = K(rank) only.
  static SessionKeys of_rank_key(const SessionSecret& rank_key, int rank);

  static SessionSecret rank_key(const SessionSecret& secret, int rank);
  static SessionSecret pair_key(const SessionSecret& higher_rank_key, int lower_rank);

  int rank() const { return rank_; }
  bool holds_secret() const { return secret_.has_value(); }
  // The secret itself (trainer ranks only; WT_ERR_STATE otherwise).
  const SessionSecret& secret() const;
  const SessionSecret& own_key() const { return own_; }

  // The key of the pair of this rank and `peer`: derived when this rank holds the secret or is the
  // pair's higher rank, else the one learnt from the store; WT_ERR_STATE when neither.
  SessionSecret pair_key_with(int peer) const;
  bool derives_pair_key_with(int peer) const { return holds_secret() || peer < rank_; }
  void learn_pair_key(int peer, const SessionSecret& key) { learnt_[peer] = key; }

 private:
  int rank_ = 0;
  std::optional<SessionSecret> secret_;
  SessionSecret own_;
  std::map<int, SessionSecret> learnt_;
};

// The worker init info's rank_keys (<wt/sdk/rank_keys.hpp>) for the workers at rank offsets
// 1..workers, the worker at offset o being mesh rank first_mesh_rank + o - 1: K(rank), hex.
nlohmann::json rank_keys_json(const SessionSecret& secret, int workers, int first_mesh_rank);
// A worker's own key (hex) from the rank_keys of its init info `what`: it must hold exactly one
// entry, the one of `rank_offset`. Errors (WT_ERR_INVALID_ARGUMENT) name the field.
std::string own_rank_key(const nlohmann::json& rank_keys, int64_t rank_offset,
                         const std::string& what);

}  // namespace wt::plugins
