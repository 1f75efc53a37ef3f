#include "m2n_holdings.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/errors.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <memory>
#include <string_view>
#include <unordered_set>

namespace wt::m2n {

using sdk::fail;

nlohmann::json holdings_json(const std::vector<ParamMeta>& meta) {
  auto out = nlohmann::json::array();
  for (const auto& m : meta)
    out.push_back({m.name, std::string(torch_name(m.dtype)), m.shape, m.shard_dim, m.shard_offset,
                   m.shard_offset + m.shard_length});
  return out;
}

std::vector<ParamMeta> holdings_from_json(const nlohmann::json& j, int rank) {
  std::vector<ParamMeta> out;
  try {
    for (const auto& e : j.get_ref<const nlohmann::json::array_t&>()) {
      ParamMeta m;
      m.name = e.at(0).get<std::string>();
      auto dt = dtype_from_torch_name(e.at(1).get<std::string>());
      if (!dt) fail(WT_ERR_INVALID_ARGUMENT, "unknown dtype for '{}'", m.name);
      m.dtype = *dt;
      m.shape = e.at(2).get<std::vector<int64_t>>();
      m.shard_dim = e.at(3).get<int>();
      m.shard_offset = e.at(4).get<int64_t>();
      m.shard_length = e.at(5).get<int64_t>() - m.shard_offset;
      out.push_back(std::move(m));
    }
  } catch (const nlohmann::json::exception& e) {
    fail(WT_ERR_INVALID_ARGUMENT, "the holdings trainer rank {} gathered are malformed: {}", rank,
         e.what());
  }
  return out;
}

Layout layout_from_holdings(const std::vector<std::vector<ParamMeta>>& per_rank,
                            const InferenceLayout& inference, const std::vector<TpRule>& rules) {
  Layout layout;
  layout.trainer_ranks = static_cast<int>(per_rank.size());
  layout.inference = inference;
  const auto& base = per_rank.at(0);
  for (std::size_t k = 1; k < per_rank.size(); ++k) {
    const auto& mine = per_rank[k];
    if (mine.size() != base.size())
      fail(WT_ERR_INVALID_ARGUMENT,
           "trainer rank {} declares {} parameters, trainer rank 0 {}: every rank must declare "
           "the same model (holding all, part or none of each parameter)",
           k, mine.size(), base.size());
    for (std::size_t i = 0; i < base.size(); ++i)
      if (mine[i].name != base[i].name || !(mine[i].dtype == base[i].dtype) ||
          mine[i].shape != base[i].shape)
        fail(WT_ERR_INVALID_ARGUMENT,
             "trainer rank {} declares parameter {} as '{}' {} [{}], trainer rank 0 as '{}' {} "
             "[{}]: every rank must declare the same model in the same order",
             k, i, mine[i].name, torch_name(mine[i].dtype), fmt::join(mine[i].shape, ", "),
             base[i].name, torch_name(base[i].dtype), fmt::join(base[i].shape, ", "));
  }
  // Parameters alike in dtype, shape, holdings and TP rule share a group (planned once).
  std::map<std::string, std::size_t> group_of;
  std::unordered_set<std::string_view> seen;
  for (std::size_t i = 0; i < base.size(); ++i) {
    if (!seen.insert(base[i].name).second)
      fail(WT_ERR_INVALID_ARGUMENT, "the weight source declares '{}' twice", base[i].name);
    int tp_dim = -1;
    for (const auto& r : rules)
      if (glob_match(r.match, base[i].name)) {
        tp_dim = r.dim;
        break;
      }
    if (tp_dim >= static_cast<int>(base[i].shape.size()))
      fail(WT_ERR_INVALID_ARGUMENT,
           "the tp_rules split '{}' along dimension {}, but it has {} dimension(s)", base[i].name,
           tp_dim, base[i].shape.size());
    std::vector<Held> held;
    std::string key = fmt::format("{}/{}/{}/[{}]|", base[i].dtype.code, base[i].dtype.bits,
                                  base[i].dtype.lanes, fmt::join(base[i].shape, ","));
    key += std::to_string(tp_dim);
    for (std::size_t k = 0; k < per_rank.size(); ++k) {
      const ParamMeta& m = per_rank[k][i];
      if (m.sharded() && m.shard_length == 0) continue;  // this rank holds none of it
      Held h{static_cast<int>(k), m.sharded() ? m.shard_dim : -1, m.shard_offset,
             m.shard_offset + m.shard_length};
      key += fmt::format("|{}:{}:{}:{}", h.rank, h.dim, h.lo, h.hi);
      held.push_back(h);
    }
    auto [it, fresh] = group_of.try_emplace(key, layout.groups.size());
    if (fresh) {
      ParamGroup g;
      g.dtype = base[i].dtype;
      g.shape = base[i].shape;
      g.tp_dim = tp_dim;
      g.holdings = std::make_shared<const std::vector<Held>>(std::move(held));
      layout.groups.push_back(std::move(g));
    }
    layout.groups[it->second].names.push_back(base[i].name);
  }
  return layout;
}

}  // namespace wt::m2n
