#include "session_keys.hpp"

#include <wt/sdk/errors.hpp>
#include <wt/sdk/json_fields.hpp>
#include <wt/sdk/rank_keys.hpp>

namespace wt::plugins {

SessionKeys SessionKeys::of_secret(const SessionSecret& secret, int rank) {
  SessionKeys k;
  k.rank_ = rank;
  k.secret_ = secret;
  k.own_ = rank_key(secret, rank);
  return k;
}

SessionKeys SessionKeys::of_rank_key(const SessionSecret& rank_key, int rank) {
  SessionKeys k;
  k.rank_ = rank;
  k.own_ = rank_key;
  return k;
}

SessionSecret SessionKeys::rank_key(const SessionSecret& secret, int rank) {
  return secret.derive("wt rank key", std::to_string(rank));
}

SessionSecret SessionKeys::pair_key(const SessionSecret& higher_rank_key, int lower_rank) {
  return higher_rank_key.derive("wt pair key", std::to_string(lower_rank));
}

const SessionSecret& SessionKeys::secret() const {
  if (!secret_) sdk::fail(WT_ERR_STATE, "rank {} does not hold the session secret", rank_);
  return *secret_;
}

SessionSecret SessionKeys::pair_key_with(int peer) const {
  if (peer < rank_) return pair_key(own_, peer);
  if (secret_) return pair_key(rank_key(*secret_, peer), rank_);
  auto it = learnt_.find(peer);
  if (it == learnt_.end())
    sdk::fail(WT_ERR_STATE, "rank {} has no key for its pair with rank {}", rank_, peer);
  return it->second;
}

nlohmann::json rank_keys_json(const SessionSecret& secret, int workers, int first_mesh_rank) {
  nlohmann::json keys = nlohmann::json::object();
  for (int o = 1; o <= workers; ++o)
    keys[std::to_string(o)] = SessionKeys::rank_key(secret, first_mesh_rank + o - 1).hex();
  return keys;
}

std::string own_rank_key(const nlohmann::json& rank_keys, int64_t rank_offset,
                         const std::string& what) {
  const std::string field = sdk::kRankKeysField;
  if (!rank_keys.is_object())
    sdk::fail_field(field, WT_ERR_INVALID_ARGUMENT,
                    "invalid {}: field '{}' must be an object from rank_offset to that rank's key",
                    what, field);
  const auto mine = rank_keys.find(std::to_string(rank_offset));
  if (mine == rank_keys.end() || !mine->is_string())
    sdk::fail_field(field, WT_ERR_INVALID_ARGUMENT,
                    "invalid {}: field '{}' holds no key for rank_offset {}", what, field,
                    rank_offset);
  if (rank_keys.size() != 1)
    sdk::fail_field(field, WT_ERR_INVALID_ARGUMENT,
                    "invalid {}: field '{}' holds the keys of {} ranks, not only rank_offset {}'s: "
                    "whatever delivered it did not split it per rank, so every receiver could act "
                    "as every other (wt's fan-out client and wt serve split it; a Python engine "
                    "gives each rank only its own entry)",
                    what, field, rank_keys.size(), rank_offset);
  return SessionSecret::from_hex(mine->get<std::string>(), field).hex();
}

}  // namespace wt::plugins
