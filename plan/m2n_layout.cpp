#include "m2n_layout.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/errors.hpp>
#include <wt/sdk/json_fields.hpp>

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
  sdk::fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: {}", what, why);
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

// The trainer's "holdings": which trainer ranks hold what of each parameter, by name rule.
std::vector<HoldingRule> read_holding_rules(sdk::FieldReader& trainer, const std::string& tw) {
  const auto& hr = trainer.get_array("holdings");
  if (hr.size() > 1024) bad(tw, "more than 1024 holdings rules");
  std::vector<HoldingRule> rules;
  for (std::size_t i = 0; i < hr.size(); ++i) {
    const std::string rw = fmt::format("{}, holdings[{}]", tw, i);
    sdk::FieldReader r(hr[i], rw);
    r.only({"match", "shard_dim", "replicated"});
    HoldingRule rule{r.get_string("match")};
    const bool replicated = r.has("replicated") && r.get_bool("replicated");
    if (replicated == r.has("shard_dim"))
      bad(rw, "give either \"shard_dim\": d or \"replicated\": true");
    if (!replicated) rule.shard_dim = static_cast<int>(r.get_int_in("shard_dim", 0, kMaxDims - 1));
    rules.push_back(std::move(rule));
  }
  return rules;
}

// The inference side's shape (into `l`) and its tensor-parallel rules.
std::vector<TpRule> read_inference(sdk::FieldReader& inf, Layout& l, const std::string& iw) {
  l.inference.replicas = static_cast<int>(inf.get_int_in("replicas", 1, kMaxRanks));
  l.inference.tensor_parallel = static_cast<int>(inf.get_int_in("tensor_parallel", 1, 1024));
  if (int64_t{l.inference.replicas} * l.inference.tensor_parallel > kMaxRanks)
    bad(iw, fmt::format("more than {} worker ranks", kMaxRanks));
  std::vector<TpRule> rules;
  if (!inf.has("rules")) return rules;
  const auto& tr = inf.get_array("rules");
  if (tr.size() > 1024) bad(iw, "more than 1024 rules");
  for (std::size_t i = 0; i < tr.size(); ++i) {
    sdk::FieldReader r(tr[i], fmt::format("{}, rules[{}]", iw, i));
    r.only({"match", "dim"});
    rules.push_back(
        {r.get_string("match"), static_cast<int>(r.get_int_in("dim", -1, kMaxDims - 1))});
  }
  return rules;
}

// One "parameters" entry: its names expanded, its dtype and shape checked.
struct ParamEntry {
  std::vector<std::string> names;
  DLDataType dtype{};
  std::vector<int64_t> shape;
};

std::vector<std::pair<int64_t, int64_t>> read_ranges(sdk::FieldReader& e, const std::string& pw) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  if (!e.has("ranges")) return ranges;
  for (const auto& r : e.get_array("ranges")) {
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() || !r[1].is_number_integer() ||
        r[0].get<int64_t>() < 0 || r[1].get<int64_t>() <= r[0].get<int64_t>() ||
        r[1].get<int64_t>() > (int64_t{1} << 31))
      bad(pw, "each range must be [first, last + 1] with 0 <= first < last + 1 <= 2^31");
    ranges.emplace_back(r[0].get<int64_t>(), r[1].get<int64_t>());
  }
  return ranges;
}

std::vector<int64_t> read_shape(sdk::FieldReader& e, const std::string& pw) {
  const auto& sj = e.get_array("shape");
  if (sj.size() > static_cast<std::size_t>(kMaxDims))
    bad(pw, fmt::format("more than {} dims", kMaxDims));
  std::vector<int64_t> shape;
  uint64_t numel = 1;
  for (const auto& d : sj) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > (int64_t{1} << 40))
      bad(pw, "every dimension of 'shape' must be an integer in 1..2^40");
    shape.push_back(d.get<int64_t>());
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(shape.back()), &numel) ||
        numel > (uint64_t{1} << 50))
      bad(pw, "the shape has more than 2^50 elements");
  }
  return shape;
}

ParamEntry read_parameter_entry(const nlohmann::json& j, const std::string& pw) {
  sdk::FieldReader e(j, pw);
  e.only({"name", "ranges", "dtype", "shape"});
  const std::string pattern = e.get_string("name");
  if (pattern.empty() || pattern.size() > 512) bad(pw, "'name' must have 1 to 512 characters");
  const auto ranges = read_ranges(e, pw);
  ParamEntry p;
  const std::string dtype_name = e.get_string("dtype");
  const auto dtype = dtype_from_torch_name(dtype_name);
  if (!dtype || element_size(*dtype) == 0)
    bad(pw, fmt::format("dtype '{}' is not a dtype wt knows", dtype_name));
  p.dtype = *dtype;
  p.shape = read_shape(e, pw);
  p.names = expand_names(pattern, ranges, pw);
  return p;
}

// Puts each parameter in its group, within the bounds on names, glob steps and holdings.
class Grouping {
 public:
  Grouping(Layout& l, std::vector<HoldingRule> holding, std::vector<TpRule> tp, std::string what)
      : l_(l),
        holding_(std::move(holding)),
        tp_(std::move(tp)),
        what_(std::move(what)),
        tw_(what_ + ", trainer"),
        iw_(what_ + ", inference") {}

  void add(ParamEntry& p, const std::string& pw) {
    for (const auto& name : p.names)
      if (!seen_.insert(name).second) bad(pw, fmt::format("parameter '{}' is listed twice", name));
    total_ += p.names.size();
    if (total_ > kMaxParams) bad(what_, fmt::format("more than {} parameters", kMaxParams));
    for (const auto& name : p.names) name_bytes_ += name.size();
    if (name_bytes_ > kMaxNameBytes)
      bad(what_, fmt::format("its names take more than {} MiB", kMaxNameBytes >> 20));
    // Members of one entry that different rules pick go to different groups.
    std::map<std::pair<std::size_t, int>, std::size_t> group_of;  // (holding rule, tp dim) -> group
    for (auto& name : p.names) {
      const std::size_t rule = holding_rule_of(name, p.shape.size());
      const int tp_dim = tp_dim_of(name, p.shape.size());
      auto [it, fresh] = group_of.try_emplace({rule, tp_dim}, l_.groups.size());
      if (fresh)
        l_.groups.push_back(
            {{}, p.dtype, p.shape, holdings(holding_[rule].shard_dim, p.shape), tp_dim});
      l_.groups[it->second].names.push_back(std::move(name));
    }
  }
  std::size_t total() const { return total_; }

 private:
  bool matches(const std::string& rule, const std::string& name) {
    const bool m = glob_match(rule, name, &glob_steps_);
    if (glob_steps_ > kMaxGlobSteps)
      bad(what_, fmt::format("matching its parameter names against the holdings and inference "
                             "rules takes more than {} steps (fewer or simpler '*' rules)",
                             kMaxGlobSteps));
    return m;
  }
  std::size_t holding_rule_of(const std::string& name, std::size_t dims) {
    std::size_t rule = holding_.size();
    for (std::size_t k = 0; k < holding_.size() && rule == holding_.size(); ++k)
      if (matches(holding_[k].match, name)) rule = k;
    if (rule == holding_.size())
      bad(tw_, fmt::format("no holdings rule matches parameter '{}'", name));
    const int shard_dim = holding_[rule].shard_dim;
    if (shard_dim >= static_cast<int>(dims))
      bad(fmt::format("{}, holdings[{}]", tw_, rule),
          fmt::format("shard_dim {} is past the {} dims of '{}'", shard_dim, dims, name));
    return rule;
  }
  int tp_dim_of(const std::string& name, std::size_t dims) {
    int tp_dim = -1;
    for (const auto& r : tp_)
      if (matches(r.match, name)) {
        tp_dim = r.dim;
        break;
      }
    if (tp_dim >= static_cast<int>(dims))
      bad(iw_,
          fmt::format("the rule for '{}' splits dim {}, but it has {} dims", name, tp_dim, dims));
    return tp_dim;
  }
  // The holdings of one (shard dim, shape) are shared by every group that has them.
  std::shared_ptr<const std::vector<Held>> holdings(int shard_dim,
                                                    const std::vector<int64_t>& shape) {
    auto& h = shared_[{shard_dim, shape}];
    if (!h) {
      held_entries_ += static_cast<std::size_t>(l_.trainer_ranks);
      if (held_entries_ > kMaxHeldEntries)
        bad(what_, fmt::format("what its {} trainer ranks hold of its parameters' {} distinct "
                               "shapes would take more than {} entries",
                               l_.trainer_ranks, shared_.size(), kMaxHeldEntries));
      h = std::make_shared<const std::vector<Held>>(
          holdings_of(shape, shard_dim, l_.trainer_ranks));
    }
    return h;
  }

  Layout& l_;
  const std::vector<HoldingRule> holding_;
  const std::vector<TpRule> tp_;
  const std::string what_, tw_, iw_;
  std::map<std::tuple<int, std::vector<int64_t>>, std::shared_ptr<const std::vector<Held>>> shared_;
  std::unordered_set<std::string> seen_;
  std::size_t total_ = 0, name_bytes_ = 0, held_entries_ = 0;
  uint64_t glob_steps_ = 0;
};

// Bounded so that what every worker receives in a round counts in 64 bits.
void check_model_bytes(const Layout& l, const std::string& what) {
  unsigned __int128 model = 0;  // a group is below 2^50 elements * 16 bytes * 2^22 members
  for (const ParamGroup& g : l.groups) {
    unsigned __int128 numel = 1;
    for (int64_t d : g.shape) numel *= static_cast<uint64_t>(d);
    model += numel * element_size(g.dtype) * g.names.size();
    if (model * static_cast<uint64_t>(l.inference.worker_ranks()) > (uint64_t{1} << 62))
      bad(what, "the model times the worker ranks is more than 2^62 bytes");
  }
}

}  // namespace

Layout layout_from_json(const nlohmann::json& j, const std::string& what) {
  if (!j.is_object()) bad(what, "the layout must be a JSON object");
  sdk::FieldReader top(j, what);
  top.only({"description", "parameters", "trainer", "inference", "engine"});
  Layout l;
  const std::string tw = what + ", trainer", iw = what + ", inference";
  auto trainer = top.get_object("trainer", tw);
  trainer.only({"ranks", "holdings"});
  l.trainer_ranks = static_cast<int>(trainer.get_int_in("ranks", 1, kMaxRanks));
  auto holding_rules = read_holding_rules(trainer, tw);
  auto inf = top.get_object("inference", iw);
  inf.only({"replicas", "tensor_parallel", "rules"});
  auto tp_rules = read_inference(inf, l, iw);
  Grouping grouping(l, std::move(holding_rules), std::move(tp_rules), what);
  const auto& params = top.get_array("parameters");
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string pw = fmt::format("{}, parameters[{}]", what, i);
    ParamEntry p = read_parameter_entry(params[i], pw);
    grouping.add(p, pw);
  }
  if (grouping.total() == 0) bad(what, "'parameters' lists none");
  if (top.has("engine")) l.engine = engine_rules_from_json(top.raw("engine"), what + ", engine");
  check_model_bytes(l, what);
  return l;
}

}  // namespace wt::m2n
