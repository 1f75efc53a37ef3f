#include "m2n_holdings.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/errors.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <xxhash.h>

#include <algorithm>
#include <utility>

#include <map>
#include <memory>
#include <string_view>
#include <unordered_set>

namespace wt::m2n {

using sdk::fail;

namespace {

// What rank `rank` of `ranks` holds of a dimension of `size` under the even split.
std::pair<int64_t, int64_t> even_slice(int64_t size, int rank, int ranks) {
  const int64_t chunk = (size + ranks - 1) / ranks;
  const int64_t lo = std::min(size, chunk * rank);
  return {lo, std::min(size, lo + chunk)};
}

// -1 whole, d the even split of dimension d, -2 another slice.
int code_of(const ParamMeta& m, int rank, int ranks) {
  if (!m.sharded()) return -1;
  const auto d = static_cast<std::size_t>(m.shard_dim);
  if (d < m.shape.size() &&
      even_slice(m.shape[d], rank, ranks) ==
          std::pair<int64_t, int64_t>{m.shard_offset, m.shard_offset + m.shard_length})
    return m.shard_dim;
  return -2;
}

std::string hex128(XXH128_hash_t h) {
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

// XXH3-128 of parameters [first, last) of `meta`: names, dtypes and full shapes.
std::string model_digest(const std::vector<ParamMeta>& meta, std::size_t first, std::size_t last) {
  XXH3_state_t* st = XXH3_createState();
  if (st == nullptr) fail(WT_ERR_SYSTEM, "out of memory digesting the model");
  XXH3_128bits_reset(st);
  for (std::size_t i = first; i < last; ++i) {
    const ParamMeta& m = meta[i];
    XXH3_128bits_update(st, m.name.data(), m.name.size() + 1);  // with its NUL: names stay apart
    const uint32_t dtype[3] = {m.dtype.code, m.dtype.bits, m.dtype.lanes};
    XXH3_128bits_update(st, dtype, sizeof dtype);
    const uint64_t ndim = m.shape.size();
    XXH3_128bits_update(st, &ndim, sizeof ndim);
    XXH3_128bits_update(st, m.shape.data(), m.shape.size() * sizeof(int64_t));
  }
  const auto h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  return hex128(h);
}

}  // namespace

nlohmann::json holdings_declaration(const std::vector<ParamMeta>& meta, int rank, int ranks) {
  auto blocks = nlohmann::json::array(), runs = nlohmann::json::array(),
       slices = nlohmann::json::array();
  for (std::size_t at = 0; at < meta.size(); at += kDeclarationBlock)
    blocks.push_back(model_digest(meta, at, std::min(meta.size(), at + kDeclarationBlock)));
  for (std::size_t i = 0; i < meta.size();) {
    const int code = code_of(meta[i], rank, ranks);
    std::size_t n = 1;
    while (i + n < meta.size() && code_of(meta[i + n], rank, ranks) == code) ++n;
    runs.push_back({n, code});
    if (code == -2)
      for (std::size_t k = i; k < i + n; ++k)
        slices.push_back(
            {meta[k].shard_dim, meta[k].shard_offset, meta[k].shard_offset + meta[k].shard_length});
    i += n;
  }
  return {{"model", model_digest(meta, 0, meta.size())},
          {"count", meta.size()},
          {"blocks", std::move(blocks)},
          {"runs", std::move(runs)},
          {"slices", std::move(slices)}};
}

std::vector<ParamMeta> holdings_from_declaration(const nlohmann::json& j, int rank, int ranks,
                                                 const std::vector<ParamMeta>& own) {
  const std::string what = fmt::format("the holdings trainer rank {} declared", rank);
  std::vector<ParamMeta> out;
  try {
    const auto count = j.at("count").get<std::size_t>();
    if (count != own.size())
      fail(WT_ERR_INVALID_ARGUMENT,
           "trainer rank {} declares {} parameters, this rank {}: every rank must declare the same "
           "model (holding all, part or none of each parameter)",
           rank, count, own.size());
    if (j.at("model").get<std::string>() != model_digest(own, 0, own.size())) {
      const auto& blocks = j.at("blocks");
      for (std::size_t b = 0, at = 0; at < own.size(); ++b, at += kDeclarationBlock) {
        const std::size_t last = std::min(own.size(), at + kDeclarationBlock);
        if (b < blocks.size() && blocks[b].get<std::string>() == model_digest(own, at, last))
          continue;
        fail(WT_ERR_INVALID_ARGUMENT,
             "trainer rank {} declares another model than this rank: the names, dtypes or shapes "
             "of parameters {} to {} ('{}' to '{}') differ; every rank must declare the same "
             "model in the same order",
             rank, at, last - 1, own[at].name, own[last - 1].name);
      }
      fail(WT_ERR_INVALID_ARGUMENT, "trainer rank {} declares another model than this rank", rank);
    }
    const auto& slices = j.at("slices");
    std::size_t next_slice = 0;
    out.reserve(own.size());
    for (const auto& run : j.at("runs")) {
      const auto n = run.at(0).get<std::size_t>();
      const int code = run.at(1).get<int>();
      if (n == 0 || n > own.size() - out.size())
        fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: its runs do not add up to {} parameters", what,
             own.size());
      for (std::size_t k = 0; k < n; ++k) {
        ParamMeta m{own[out.size()].name, own[out.size()].dtype, own[out.size()].shape};
        if (code >= 0) {
          if (static_cast<std::size_t>(code) >= m.shape.size())
            fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: '{}' has no dimension {}", what, m.name,
                 code);
          const auto [lo, hi] = even_slice(m.shape[static_cast<std::size_t>(code)], rank, ranks);
          m.shard_dim = code;
          m.shard_offset = lo;
          m.shard_length = hi - lo;
        } else if (code == -2) {
          const auto& e = slices.at(next_slice++);
          m.shard_dim = e.at(0).get<int>();
          m.shard_offset = e.at(1).get<int64_t>();
          m.shard_length = e.at(2).get<int64_t>() - m.shard_offset;
        } else if (code != -1) {
          fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: a run of code {}", what, code);
        }
        out.push_back(std::move(m));
      }
    }
    if (out.size() != own.size() || next_slice != slices.size())
      fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: its runs do not add up to {} parameters", what,
           own.size());
  } catch (const nlohmann::json::exception& e) {
    fail(WT_ERR_INVALID_ARGUMENT, "{} are malformed: {}", what, e.what());
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
