// Secrets for one rank only, in an init info: the field `rank_keys`.
//
// A backend whose trainer gives each worker rank something the other ranks must not learn (the
// host-memory backends give each its own key: a receiver can then act only as itself) puts it in
// the init info as
//   "rank_keys": {"<rank_offset>": "<that rank's secret>", ...}
// keyed by the rank_offset each worker rank will read. Whoever splits an init info among
// inference ranks passes each only its own entries: wt's fan-out client gives each replica the
// entries of its ranks, and the receiver group (`wt serve`) gives each of its ranks its one entry.
// A worker takes its own entry with own_rank_key() and refuses an init info that holds another
// rank's. (Logs redact the field, as every field named "..._keys": <wt/log.hpp>.)
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace wt::sdk {

inline constexpr char kRankKeysField[] = "rank_keys";

// Keeps, in `info`'s rank_keys, only the entries of rank offsets first..first+count-1 (an info
// without the field, or not an object, stays as it was). Looks up each rank of the range, so that
// splitting one info among every replica of a world costs O(world log world).
inline void keep_rank_keys(nlohmann::json& info, int64_t first, int64_t count) {
  if (!info.is_object()) return;
  auto it = info.find(kRankKeysField);
  if (it == info.end() || !it->is_object()) return;
  nlohmann::json kept = nlohmann::json::object();
  for (int64_t r = first; r < first + count && kept.size() < it->size(); ++r)
    if (auto e = it->find(std::to_string(r)); e != it->end()) kept[e.key()] = *e;
  *it = std::move(kept);
}

}  // namespace wt::sdk
