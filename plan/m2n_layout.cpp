#include "m2n_layout.hpp"

#include "m2n_fields.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/errors.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <tuple>
#include <unordered_set>

namespace wt::m2n {

bool glob_match(std::string_view pattern, std::string_view text) {
  // Iterative, with one backtrack point: linear in practice, never exponential.
  std::size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p, ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {

constexpr int kMaxRanks = 1 << 16;
constexpr std::size_t kMaxParams = std::size_t{1} << 22;
constexpr int kMaxDims = 8;

[[noreturn]] void bad(const std::string& what, const std::string& why) {
  detail::refuse("invalid " + what, why);
}

int64_t int_field(const nlohmann::json& o, const char* key, const std::string& what, int64_t lo,
                  int64_t hi) {
  return detail::int_in(o, key, "invalid " + what, lo, hi);
}

const nlohmann::json& object_field(const nlohmann::json& o, const char* key,
                                   const std::string& what) {
  if (!o.contains(key) || !o.at(key).is_object())
    bad(what, fmt::format("'{}' must be an object", key));
  return o.at(key);
}

const nlohmann::json& array_field(const nlohmann::json& o, const char* key,
                                  const std::string& what) {
  if (!o.contains(key) || !o.at(key).is_array())
    bad(what, fmt::format("'{}' must be an array", key));
  return o.at(key);
}

// A key the layout does not know is a typo, not something to ignore.
void only_keys(const nlohmann::json& o, std::initializer_list<std::string_view> keys,
               const std::string& what) {
  for (const auto& [k, v] : o.items())
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      bad(what, fmt::format("unknown key '{}' (known: {})", k, fmt::join(keys, ", ")));
}

std::string string_field(const nlohmann::json& o, const char* key, const std::string& what) {
  if (!o.contains(key) || !o.at(key).is_string())
    bad(what, fmt::format("'{}' must be a string", key));
  return o.at(key).get<std::string>();
}

// The names of one "parameters" entry: each "{}" takes the values of its range in turn, the last
// range varying fastest.
std::vector<std::string> expand_names(const std::string& pattern,
                                      const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                      const std::string& what) {
  std::vector<std::string> parts;
  std::size_t at = 0;
  for (std::size_t k; (k = pattern.find("{}", at)) != std::string::npos; at = k + 2)
    parts.push_back(pattern.substr(at, k - at));
  parts.push_back(pattern.substr(at));
  if (parts.size() - 1 != ranges.size())
    bad(what, fmt::format("the name has {} '{{}}' but {} ranges are given", parts.size() - 1,
                          ranges.size()));
  std::size_t count = 1;
  for (auto [lo, hi] : ranges) {
    count *= static_cast<std::size_t>(hi - lo);
    if (count > kMaxParams) bad(what, fmt::format("more than {} parameters", kMaxParams));
  }
  std::vector<std::string> names;
  names.reserve(count);
  std::vector<int64_t> at_value(ranges.size());
  for (std::size_t i = 0; i < ranges.size(); ++i) at_value[i] = ranges[i].first;
  for (std::size_t n = 0; n < count; ++n) {
    std::string name = parts[0];
    for (std::size_t i = 0; i < ranges.size(); ++i)
      name += std::to_string(at_value[i]) + parts[i + 1];
    names.push_back(std::move(name));
    for (std::size_t i = ranges.size(); i-- > 0;) {  // odometer, the last range fastest
      if (++at_value[i] < ranges[i].second) break;
      at_value[i] = ranges[i].first;
    }
  }
  return names;
}

struct HoldingRule {
  std::string match;
  int shard_dim = -1;  // -1: replicated
};

struct TpRule {
  std::string match;
  int dim = -1;
};

std::vector<Held> holdings_of(const std::vector<int64_t>& shape, int shard_dim, int ranks) {
  std::vector<Held> h;
  if (shard_dim < 0) {
    for (int r = 0; r < ranks; ++r) h.push_back({r, -1, 0, 0});
    return h;
  }
  const int64_t size = shape[static_cast<std::size_t>(shard_dim)];
  const int64_t chunk = (size + ranks - 1) / ranks;
  for (int r = 0; r < ranks; ++r) {
    const int64_t lo = std::min(size, chunk * r), hi = std::min(size, chunk * (r + 1));
    if (lo < hi) h.push_back({r, shard_dim, lo, hi});
  }
  return h;
}

}  // namespace

Layout layout_from_json(const nlohmann::json& j, const std::string& what) {
  if (!j.is_object()) bad(what, "the layout must be a JSON object");
  only_keys(j, {"description", "parameters", "trainer", "inference"}, what);
  Layout l;
  const auto& trainer = object_field(j, "trainer", what);
  const std::string tw = what + ", trainer";
  only_keys(trainer, {"ranks", "holdings"}, tw);
  l.trainer_ranks = static_cast<int>(int_field(trainer, "ranks", tw, 1, kMaxRanks));
  std::vector<HoldingRule> holding_rules;
  const auto& hr = array_field(trainer, "holdings", tw);
  if (hr.size() > 1024) bad(tw, "more than 1024 holdings rules");
  for (std::size_t i = 0; i < hr.size(); ++i) {
    const std::string rw = fmt::format("{}, holdings[{}]", tw, i);
    if (!hr[i].is_object()) bad(rw, "must be an object");
    only_keys(hr[i], {"match", "shard_dim", "replicated"}, rw);
    HoldingRule r{string_field(hr[i], "match", rw)};
    const bool replicated = hr[i].contains("replicated") && hr[i].at("replicated") == true;
    if (replicated == hr[i].contains("shard_dim"))
      bad(rw, "give either \"shard_dim\": d or \"replicated\": true");
    if (!replicated)
      r.shard_dim = static_cast<int>(int_field(hr[i], "shard_dim", rw, 0, kMaxDims - 1));
    holding_rules.push_back(std::move(r));
  }

  const auto& inf = object_field(j, "inference", what);
  const std::string iw = what + ", inference";
  only_keys(inf, {"replicas", "tensor_parallel", "rules"}, iw);
  l.inference.replicas = static_cast<int>(int_field(inf, "replicas", iw, 1, kMaxRanks));
  l.inference.tensor_parallel = static_cast<int>(int_field(inf, "tensor_parallel", iw, 1, 1024));
  if (int64_t{l.inference.replicas} * l.inference.tensor_parallel > kMaxRanks)
    bad(iw, fmt::format("more than {} worker ranks", kMaxRanks));
  std::vector<TpRule> tp_rules;
  if (inf.contains("rules")) {
    const auto& tr = array_field(inf, "rules", iw);
    if (tr.size() > 1024) bad(iw, "more than 1024 rules");
    for (std::size_t i = 0; i < tr.size(); ++i) {
      const std::string rw = fmt::format("{}, rules[{}]", iw, i);
      if (!tr[i].is_object()) bad(rw, "must be an object");
      only_keys(tr[i], {"match", "dim"}, rw);
      tp_rules.push_back({string_field(tr[i], "match", rw),
                          static_cast<int>(int_field(tr[i], "dim", rw, -1, kMaxDims - 1))});
    }
  }

  // Members of one entry that different rules pick go to different groups; the holdings of one
  // (rule, shape) are shared.
  std::map<std::tuple<int, std::vector<int64_t>>, std::shared_ptr<const std::vector<Held>>> shared;
  std::size_t total = 0;
  std::unordered_set<std::string> seen;
  const auto& params = array_field(j, "parameters", what);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string pw = fmt::format("{}, parameters[{}]", what, i);
    const auto& e = params[i];
    if (!e.is_object()) bad(pw, "must be an object");
    only_keys(e, {"name", "ranges", "dtype", "shape"}, pw);
    const std::string pattern = string_field(e, "name", pw);
    if (pattern.empty() || pattern.size() > 512) bad(pw, "'name' must have 1 to 512 characters");
    std::vector<std::pair<int64_t, int64_t>> ranges;
    if (e.contains("ranges")) {
      for (const auto& r : array_field(e, "ranges", pw)) {
        if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() ||
            !r[1].is_number_integer() || r[0].get<int64_t>() < 0 ||
            r[1].get<int64_t>() <= r[0].get<int64_t>() || r[1].get<int64_t>() > (int64_t{1} << 31))
          bad(pw, "each range must be [first, last + 1] with 0 <= first < last + 1 <= 2^31");
        ranges.emplace_back(r[0].get<int64_t>(), r[1].get<int64_t>());
      }
    }
    const std::string dtype_name = string_field(e, "dtype", pw);
    const auto dtype = dtype_from_torch_name(dtype_name);
    if (!dtype || element_size(*dtype) == 0)
      bad(pw, fmt::format("dtype '{}' is not a dtype wt knows", dtype_name));
    std::vector<int64_t> shape;
    const auto& sj = array_field(e, "shape", pw);
    if (sj.size() > static_cast<std::size_t>(kMaxDims))
      bad(pw, fmt::format("more than {} dims", kMaxDims));
    uint64_t numel = 1;
    for (const auto& d : sj) {
      if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > (int64_t{1} << 40))
        bad(pw, "every dimension of 'shape' must be an integer in 1..2^40");
      shape.push_back(d.get<int64_t>());
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(shape.back()), &numel) ||
          numel > (uint64_t{1} << 50))
        bad(pw, "the shape has more than 2^50 elements");
    }
    std::vector<std::string> names = expand_names(pattern, ranges, pw);
    for (const auto& name : names)
      if (!seen.insert(name).second) bad(pw, fmt::format("parameter '{}' is listed twice", name));
    total += names.size();
    if (total > kMaxParams) bad(what, fmt::format("more than {} parameters", kMaxParams));
    std::map<std::pair<std::size_t, int>, std::size_t> group_of;  // (holding rule, tp dim) -> group
    for (auto& name : names) {
      std::size_t rule = holding_rules.size();
      for (std::size_t k = 0; k < holding_rules.size() && rule == holding_rules.size(); ++k)
        if (glob_match(holding_rules[k].match, name)) rule = k;
      if (rule == holding_rules.size())
        bad(tw, fmt::format("no holdings rule matches parameter '{}'", name));
      const int shard_dim = holding_rules[rule].shard_dim;
      if (shard_dim >= static_cast<int>(shape.size()))
        bad(fmt::format("{}, holdings[{}]", tw, rule),
            fmt::format("shard_dim {} is past the {} dims of '{}'", shard_dim, shape.size(), name));
      int tp_dim = -1;
      for (const auto& r : tp_rules)
        if (glob_match(r.match, name)) {
          tp_dim = r.dim;
          break;
        }
      if (tp_dim >= static_cast<int>(shape.size()))
        bad(iw, fmt::format("the rule for '{}' splits dim {}, but it has {} dims", name, tp_dim,
                            shape.size()));
      auto [it, fresh] = group_of.try_emplace({rule, tp_dim}, l.groups.size());
      if (fresh) {
        auto& h = shared[{shard_dim, shape}];
        if (!h)
          h = std::make_shared<const std::vector<Held>>(
              holdings_of(shape, shard_dim, l.trainer_ranks));
        l.groups.push_back({{}, *dtype, shape, h, tp_dim});
      }
      l.groups[it->second].names.push_back(std::move(name));
    }
  }
  if (total == 0) bad(what, "'parameters' lists none");
  // Bounded so that what every worker receives in a round counts in 64 bits.
  unsigned __int128 model = 0;  // a group is below 2^50 elements * 16 bytes * 2^22 members
  for (const ParamGroup& g : l.groups) {
    unsigned __int128 numel = 1;
    for (int64_t d : g.shape) numel *= static_cast<uint64_t>(d);
    model += numel * element_size(g.dtype) * g.names.size();
    if (model * static_cast<uint64_t>(l.inference.worker_ranks()) > (uint64_t{1} << 62))
      bad(what, "the model times the worker ranks is more than 2^62 bytes");
  }
  return l;
}

}  // namespace wt::m2n
