#include "m2n_holdings.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/errors.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <xxhash.h>

#include <algorithm>
#include <utility>

#include <memory>
#include <string_view>
#include <unordered_map>
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

RankHoldings RankHoldings::from_declaration(const nlohmann::json& j, int rank, int ranks,
                                            const std::vector<ParamMeta>& own) {
  const std::string what = fmt::format("the holdings trainer rank {} declared", rank);
  RankHoldings h;
  h.rank_ = rank;
  h.ranks_ = ranks;
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
    for (const auto& e : j.at("slices"))
      h.slices_.push_back({e.at(0).get<int>(), e.at(1).get<int64_t>(), e.at(2).get<int64_t>()});
    // Every run checked against the model once, so that a cursor can trust them.
    std::size_t at = 0, slices = 0;
    for (const auto& run : j.at("runs")) {
      const auto n = run.at(0).get<std::size_t>();
      const int code = run.at(1).get<int>();
      if (n == 0 || n > own.size() - at)
        fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: its runs do not add up to {} parameters", what,
             own.size());
      if (code < -2) fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: a run of code {}", what, code);
      for (std::size_t k = at; k < at + n; ++k) {
        const ParamMeta& m = own[k];
        const int dim =
            code == -2 ? (slices < h.slices_.size() ? h.slices_[slices].dim : -1) : code;
        if (code == -2) {
          if (slices >= h.slices_.size())
            fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: fewer slices than its runs name", what);
          const Slice& s = h.slices_[slices++];
          if (s.dim < 0 || static_cast<std::size_t>(s.dim) >= m.shape.size() || s.lo < 0 ||
              s.lo > s.hi || s.hi > m.shape[static_cast<std::size_t>(s.dim)])
            fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: its slice of '{}' is out of the tensor",
                 what, m.name);
        } else if (dim >= 0 && static_cast<std::size_t>(dim) >= m.shape.size()) {
          fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: '{}' has no dimension {}", what, m.name, dim);
        }
      }
      h.runs_.emplace_back(n, code);
      at += n;
    }
    if (at != own.size() || slices != h.slices_.size())
      fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: its runs do not add up to {} parameters", what,
           own.size());
  } catch (const nlohmann::json::exception& e) {
    fail(WT_ERR_INVALID_ARGUMENT, "{} are malformed: {}", what, e.what());
  }
  return h;
}

RankHoldings::Slice RankHoldings::Cursor::next(const ParamMeta& m) {
  while (in_run_ == h_.runs_.at(run_).first) {
    ++run_;
    in_run_ = 0;
  }
  ++in_run_;
  const int code = h_.runs_[run_].second;
  if (code == -2) return h_.slices_.at(slice_++);
  if (code == -1) return {};
  const auto [lo, hi] = even_slice(m.shape[static_cast<std::size_t>(code)], h_.rank_, h_.ranks_);
  return {code, lo, hi};
}

std::vector<ParamMeta> RankHoldings::expand(const std::vector<ParamMeta>& model) const {
  std::vector<ParamMeta> out;
  out.reserve(model.size());
  Cursor c(*this);
  for (const ParamMeta& m : model) {
    const Slice s = c.next(m);
    ParamMeta p{m.name, m.dtype, m.shape};
    if (s.dim >= 0) {
      p.shard_dim = s.dim;
      p.shard_offset = s.lo;
      p.shard_length = s.hi - s.lo;
    }
    out.push_back(std::move(p));
  }
  return out;
}

Layout layout_from_holdings(const std::vector<ParamMeta>& model,
                            const std::vector<RankHoldings>& per_rank,
                            const InferenceLayout& inference, const std::vector<TpRule>& rules) {
  Layout layout;
  layout.trainer_ranks = static_cast<int>(per_rank.size());
  layout.inference = inference;
  std::vector<RankHoldings::Cursor> cursors;
  cursors.reserve(per_rank.size());
  for (const auto& h : per_rank) cursors.emplace_back(h);
  // Parameters alike in dtype, shape, holdings and TP rule share a group (planned once), found by
  // a hash of what they are and checked whole.
  std::unordered_map<uint64_t, std::vector<std::size_t>> groups_by_hash;
  std::unordered_set<std::string_view> seen;
  std::vector<Held> held;
  for (const ParamMeta& m : model) {
    if (!seen.insert(m.name).second)
      fail(WT_ERR_INVALID_ARGUMENT, "the weight source declares '{}' twice", m.name);
    int tp_dim = -1;
    for (const auto& r : rules)
      if (glob_match(r.match, m.name)) {
        tp_dim = r.dim;
        break;
      }
    if (tp_dim >= static_cast<int>(m.shape.size()))
      fail(WT_ERR_INVALID_ARGUMENT,
           "the tp_rules split '{}' along dimension {}, but it has {} dimension(s)", m.name, tp_dim,
           m.shape.size());
    held.clear();
    for (std::size_t k = 0; k < cursors.size(); ++k) {
      const RankHoldings::Slice s = cursors[k].next(m);
      if (s.dim >= 0 && s.lo == s.hi) continue;  // this rank holds none of it
      held.push_back({static_cast<int>(k), s.dim, s.dim >= 0 ? s.lo : 0, s.dim >= 0 ? s.hi : 0});
    }
    const uint32_t kind[4] = {m.dtype.code, m.dtype.bits, m.dtype.lanes,
                              static_cast<uint32_t>(tp_dim)};
    uint64_t hash = XXH3_64bits(kind, sizeof kind);
    hash = XXH3_64bits_withSeed(m.shape.data(), m.shape.size() * sizeof(int64_t), hash);
    for (const Held& h : held) {
      const int64_t e[4] = {h.rank, h.dim, h.lo, h.hi};
      hash = XXH3_64bits_withSeed(e, sizeof e, hash);
    }
    auto same = [&](const ParamGroup& g) {
      if (!(g.dtype == m.dtype) || g.shape != m.shape || g.tp_dim != tp_dim ||
          g.holdings->size() != held.size())
        return false;
      for (std::size_t k = 0; k < held.size(); ++k) {
        const Held &a = (*g.holdings)[k], &b = held[k];
        if (a.rank != b.rank || a.dim != b.dim || a.lo != b.lo || a.hi != b.hi) return false;
      }
      return true;
    };
    auto& candidates = groups_by_hash[hash];
    std::size_t group = layout.groups.size();
    for (std::size_t c : candidates)
      if (same(layout.groups[c])) group = c;
    if (group == layout.groups.size()) {
      ParamGroup g;
      g.dtype = m.dtype;
      g.shape = m.shape;
      g.tp_dim = tp_dim;
      g.holdings = std::make_shared<const std::vector<Held>>(held);
      layout.groups.push_back(std::move(g));
      candidates.push_back(group);
    }
    layout.groups[group].names.push_back(m.name);
  }
  return layout;
}

}  // namespace wt::m2n
