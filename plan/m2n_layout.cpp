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

bool glob_match(std::string_view pattern, std::string_view text, uint64_t* steps) {
  // Iterative, with one backtrack point: at most |pattern| * (|text| + 1) steps, never
  // exponential; `steps` (when given) counts them, for a caller that bounds a layout's work.
  std::size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
  uint64_t n = 0;
  bool matched = false;
  while (true) {
    ++n;
    if (t == text.size()) {
      while (p < pattern.size() && pattern[p] == '*') ++p;
      matched = p == pattern.size();
      break;
    }
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p, ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      break;
    }
  }
  if (steps != nullptr) *steps += n;
  return matched;
}

namespace {

constexpr int kMaxRanks = 1 << 16;
// What a layout may ask of the planner, so that `wt plan` and an m2n init answer any layout in
// bounded memory and time, refusing one past a bound with the bound's name: a million parameters
// (the 1 T MoE layout has under 30,000), 64 MiB of names, and 2^28 glob steps matching them
// against the rules (under a second; the 1 T layout takes under 10^7).
constexpr std::size_t kMaxParams = std::size_t{1} << 20;
constexpr std::size_t kMaxNameBytes = std::size_t{64} << 20;
constexpr uint64_t kMaxGlobSteps = uint64_t{1} << 28;
// What the trainer ranks hold, over every distinct (shard dim, shape): 8 M entries, 128 MiB (the
// 1 T layout lists under 10,000). Without it, a layout of many shapes over 65,536 ranks would ask
// for a terabyte.
constexpr std::size_t kMaxHeldEntries = std::size_t{1} << 23;
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
  // Each name is at most the pattern plus 10 digits per "{}": bounded before any is made.
  if (count * (pattern.size() + 10 * ranges.size()) > kMaxNameBytes)
    bad(what, fmt::format("its {} names would take more than {} MiB", count, kMaxNameBytes >> 20));
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
  std::size_t total = 0, name_bytes = 0, held_entries = 0;
  uint64_t glob_steps = 0;
  auto matches = [&](const std::string& rule, const std::string& name) {
    const bool m = glob_match(rule, name, &glob_steps);
    if (glob_steps > kMaxGlobSteps)
      bad(what, fmt::format("matching its parameter names against the holdings and inference "
                            "rules takes more than {} steps (fewer or simpler '*' rules)",
                            kMaxGlobSteps));
    return m;
  };
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
    for (const auto& name : names) name_bytes += name.size();
    if (name_bytes > kMaxNameBytes)
      bad(what, fmt::format("its names take more than {} MiB", kMaxNameBytes >> 20));
    std::map<std::pair<std::size_t, int>, std::size_t> group_of;  // (holding rule, tp dim) -> group
    for (auto& name : names) {
      std::size_t rule = holding_rules.size();
      for (std::size_t k = 0; k < holding_rules.size() && rule == holding_rules.size(); ++k)
        if (matches(holding_rules[k].match, name)) rule = k;
      if (rule == holding_rules.size())
        bad(tw, fmt::format("no holdings rule matches parameter '{}'", name));
      const int shard_dim = holding_rules[rule].shard_dim;
      if (shard_dim >= static_cast<int>(shape.size()))
        bad(fmt::format("{}, holdings[{}]", tw, rule),
            fmt::format("shard_dim {} is past the {} dims of '{}'", shard_dim, shape.size(), name));
      int tp_dim = -1;
      for (const auto& r : tp_rules)
        if (matches(r.match, name)) {
          tp_dim = r.dim;
          break;
        }
      if (tp_dim >= static_cast<int>(shape.size()))
        bad(iw, fmt::format("the rule for '{}' splits dim {}, but it has {} dims", name, tp_dim,
                            shape.size()));
      auto [it, fresh] = group_of.try_emplace({rule, tp_dim}, l.groups.size());
      if (fresh) {
        auto& h = shared[{shard_dim, shape}];
        if (!h) {
          held_entries += static_cast<std::size_t>(l.trainer_ranks);
          if (held_entries > kMaxHeldEntries)
            bad(what, fmt::format("what its {} trainer ranks hold of its parameters' {} distinct "
                                  "shapes would take more than {} entries",
                                  l.trainer_ranks, shared.size(), kMaxHeldEntries));
          h = std::make_shared<const std::vector<Held>>(
              holdings_of(shape, shard_dim, l.trainer_ranks));
        }
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
