#include "engine_layout.hpp"

#include "block_fp8_layout.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/errors.hpp>
#include <wt/sdk/json_fields.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <unordered_set>

namespace wt::m2n {
namespace {

constexpr std::size_t kMaxRules = 1024;
constexpr std::size_t kMaxParts = 64;
constexpr int64_t kMaxExperts = int64_t{1} << 16;
constexpr std::size_t kMaxPatternBytes = 512;
// As the layout's bounds (m2n_layout.cpp): the engine's names, and matching the rules' first parts
// against the parameters (rules x parameters prefix and suffix tests).
constexpr std::size_t kMaxNameBytes = std::size_t{64} << 20;
constexpr uint64_t kMaxSteps = uint64_t{1} << 28;

[[noreturn]] void bad(const std::string& what, const std::string& why) {
  sdk::fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: {}", what, why);
}

std::size_t count_of(std::string_view s, char c) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), c));
}

// `pattern` with its '*' (if any) replaced by `capture` and its '#' (if any) by `expert`.
std::string fill_pattern(std::string_view pattern, std::string_view capture, int64_t expert = -1) {
  std::string out;
  out.reserve(pattern.size() + capture.size() + 8);
  for (char c : pattern) {
    if (c == '*')
      out += capture;
    else if (c == '#' && expert >= 0)
      out += std::to_string(expert);
    else
      out += c;
  }
  return out;
}

// Whether `name` matches `pattern` (at most one '*'), and what the '*' stands for.
bool capture_of(std::string_view pattern, std::string_view name, std::string_view* capture) {
  const std::size_t star = pattern.find('*');
  if (star == std::string_view::npos) {
    *capture = {};
    return pattern == name;
  }
  const std::string_view prefix = pattern.substr(0, star), suffix = pattern.substr(star + 1);
  if (name.size() < prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix))
    return false;
  *capture = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  return true;
}

EngineRule read_rule(const nlohmann::json& j, const std::string& rw) {
  sdk::FieldReader r(j, rw);
  EngineRule rule;
  for (const auto& [key, value] : j.items())
    if (value.is_string() && value.get_ref<const std::string&>().size() > kMaxPatternBytes)
      bad(rw, fmt::format("'{}' is longer than {} characters", key, kMaxPatternBytes));
  if (j.contains("parts") && j["parts"].is_array())
    for (const auto& v : j["parts"])
      if (v.is_string() && v.get_ref<const std::string&>().size() > kMaxPatternBytes)
        bad(rw, fmt::format("a part is longer than {} characters", kMaxPatternBytes));
  const int kinds = int{r.has("fuse")} + int{r.has("stack")} + int{r.has("tie")};
  if (kinds != 1) bad(rw, "give exactly one of \"fuse\", \"stack\" or \"tie\"");
  if (r.has("tie")) {
    r.only({"tie", "to"});
    rule.kind = EngineRule::Kind::kTie;
    rule.into = r.get_string("tie");
    rule.parts = {r.get_string("to")};
    for (const auto& n : {rule.into, rule.parts[0]})
      if (n.empty() || n.find_first_of("*#") != std::string::npos)
        bad(rw, fmt::format("a tie names two parameters, without '*' or '#': '{}'", n));
    if (rule.into == rule.parts[0]) bad(rw, "a parameter cannot be tied to itself");
    return rule;
  }
  const bool stack = r.has("stack");
  if (stack)
    r.only({"stack", "experts", "parts"});
  else
    r.only({"fuse", "parts"});
  rule.kind = stack ? EngineRule::Kind::kStack : EngineRule::Kind::kFuse;
  rule.into = r.get_string(stack ? "stack" : "fuse");
  rule.parts = r.get_string_list("parts");
  if (stack) rule.experts = r.get_int_in("experts", 1, kMaxExperts);
  if (rule.parts.empty() || rule.parts.size() > kMaxParts)
    bad(rw, fmt::format("'parts' must list 1 to {} parameter patterns", kMaxParts));
  for (std::size_t i = 0; i < rule.parts.size(); ++i)
    for (std::size_t k = 0; k < i; ++k)
      if (rule.parts[i] == rule.parts[k])
        bad(rw, fmt::format("part '{}' is listed twice", rule.parts[i]));
  const std::size_t stars = count_of(rule.into, '*');
  if (stars > 1 || count_of(rule.into, '#') != 0 || rule.into.empty())
    bad(rw, fmt::format("the engine name '{}' may hold one '*' and no '#'", rule.into));
  for (const auto& p : rule.parts) {
    if (count_of(p, '*') != stars)
      bad(rw, fmt::format("part '{}' must hold {} '*', as the engine name '{}' does", p, stars,
                          rule.into));
    if (count_of(p, '#') != (stack ? 1u : 0u))
      bad(rw, stack ? fmt::format("part '{}' must hold one '#' (the expert's number)", p)
                    : fmt::format("part '{}' holds a '#': only a \"stack\" numbers experts", p));
  }
  return rule;
}

// One trainer parameter as the plan sends it: its place in the plan and what a TP rank holds.
struct Part {
  std::size_t order = 0;  // its place in the plan's order of parameters
  DLDataType dtype{};
  std::vector<int64_t> local_shape;
  int tp_dim = -1;
};

class Composer {
 public:
  Composer(const std::vector<WorkerParam>& sent, std::string what) : what_(std::move(what)) {
    for (const WorkerParam& p : sent) {
      const std::size_t order = names_.size();
      names_.push_back(p.name);
      if (!parts_.emplace(p.name, Part{order, p.dtype, p.local_shape, p.tp_dim}).second)
        bad(what_, fmt::format("parameter '{}' is sent twice", p.name));
    }
    owner_.assign(names_.size(), -1);
  }

  void apply(const EngineRule& rule, std::size_t index) {
    const std::string rw = fmt::format("{}[{}]", what_, index);
    if (rule.kind == EngineRule::Kind::kTie) {
      ties_.emplace_back(rule, rw);
      return;
    }
    const std::string first =
        fill_pattern(rule.parts[0], "*", rule.kind == EngineRule::Kind::kStack ? 0 : -1);
    // The first part's matches, in plan order, among the parameters no earlier rule took.
    steps_ += names_.size();
    if (steps_ > kMaxSteps)
      bad(rw, fmt::format("matching {} rules against {} parameters takes more than {} steps",
                          index + 1, names_.size(), kMaxSteps));
    std::vector<std::string> captures;
    for (std::size_t k = 0; k < names_.size(); ++k) {
      std::string_view c;
      if (owner_[k] < 0 && capture_of(first, names_[k], &c)) captures.emplace_back(c);
    }
    if (captures.empty())
      bad(rw, fmt::format("no trainer parameter that an earlier rule did not take matches its "
                          "first part '{}': the rule composes nothing",
                          first));
    for (const std::string& c : captures) {
      compose(rule, c, rw);
      // Parts sent as block FP8 bring their scales, composed alike (block_fp8_layout.hpp).
      const std::string first_part = fill_pattern(rule.parts[0], c, 0);
      if (parts_.count(scale_name_of(first_part))) compose(scales_of(rule), c, rw);
    }
  }

  EngineLayout finish() {
    EngineLayout out;
    std::vector<std::string> origin;  // per engine tensor: what made it, for errors
    // Engine tensors in the plan's order of their first part; the untaken parameters as they are.
    std::vector<int64_t> index_of(composed_.size(), -1);
    for (std::size_t k = 0; k < names_.size(); ++k) {
      const int64_t o = owner_[k];
      if (o < 0) {
        const Part& p = parts_.at(names_[k]);
        out.places.emplace(names_[k], EnginePlace{static_cast<uint32_t>(out.tensors.size()), 0});
        out.tensors.push_back({names_[k], p.dtype, p.local_shape, -1});
        origin.push_back("a trainer parameter no rule takes");
        continue;
      }
      auto& at = index_of[static_cast<std::size_t>(o)];
      if (at < 0) {
        at = static_cast<int64_t>(out.tensors.size());
        out.tensors.push_back(composed_[static_cast<std::size_t>(o)].tensor);
        origin.push_back(composed_[static_cast<std::size_t>(o)].rule);
      }
    }
    for (std::size_t c = 0; c < composed_.size(); ++c)
      for (const auto& [name, offset] : composed_[c].parts)
        out.places.emplace(name, EnginePlace{static_cast<uint32_t>(index_of[c]), offset});
    out.composed = composed_.size();
    tie(out, origin);
    std::unordered_map<std::string_view, std::size_t> seen;
    for (std::size_t t = 0; t < out.tensors.size(); ++t) {
      auto [it, fresh] = seen.emplace(out.tensors[t].name, t);
      if (!fresh)
        bad(what_, fmt::format("engine parameter '{}' is made twice: by {} and by {}",
                               out.tensors[t].name, origin[it->second], origin[t]));
    }
    return out;
  }

 private:
  struct Composed {
    EngineTensor tensor;
    std::string rule;                                     // "engine_layout[i]", for errors
    std::vector<std::pair<std::string, uint64_t>> parts;  // trainer name, element offset
  };

  static EngineRule scales_of(const EngineRule& rule) {
    EngineRule scales = rule;
    scales.into = scale_name_of(rule.into);
    for (auto& p : scales.parts) p = scale_name_of(p);
    return scales;
  }

  // One engine parameter of `rule`, its '*' standing for `c`.
  void compose(const EngineRule& rule, const std::string& c, const std::string& rw) {
    const bool stack = rule.kind == EngineRule::Kind::kStack;
    const std::string into = fill_pattern(rule.into, c);
    name_bytes_ += into.size();
    if (name_bytes_ > kMaxNameBytes)
      bad(rw, fmt::format("its engine names take more than {} MiB", kMaxNameBytes >> 20));
    const auto self = static_cast<int64_t>(composed_.size());
    Composed out;
    out.tensor.name = into;
    out.rule = rw;
    const int64_t experts = stack ? rule.experts : 1;
    std::vector<const Part*> expert0;  // expert 0's parts: every expert's must be alike
    int64_t rows_total = 0;
    for (int64_t e = 0; e < experts; ++e) {
      int64_t rows = 0;
      std::vector<std::pair<const std::string*, int64_t>> rows_at;
      for (std::size_t k = 0; k < rule.parts.size(); ++k) {
        const std::string name = fill_pattern(rule.parts[k], c, stack ? e : -1);
        auto it = parts_.find(name);
        if (it == parts_.end())
          bad(rw, fmt::format("engine parameter '{}' is made of '{}', which the trainer does not "
                              "send",
                              into, name));
        const Part& p = it->second;
        if (owner_[p.order] == self)
          bad(rw,
              fmt::format("'{}' is named twice as a part of engine parameter '{}'", name, into));
        if (owner_[p.order] >= 0) {
          const Composed& o = composed_[static_cast<std::size_t>(owner_[p.order])];
          bad(rw, fmt::format("'{}' is a part of engine parameter '{}' ({}) already; a trainer "
                              "parameter is a part of one engine parameter at most",
                              name, o.tensor.name, o.rule));
        }
        check_part(p, name, into, e == 0 ? nullptr : expert0[k], k == 0 ? nullptr : expert0[0], rw);
        if (e == 0) {
          expert0.push_back(&p);
          if (k == 0) out.tensor.dtype = p.dtype;
        }
        // Block FP8 weights fuse in whole blocks: a 2-D part's rows, but the last part's, fill
        // its last block, or a block of the engine's tensor would straddle two parts.
        if (p.dtype.code == kDLFloat8E4m3fnCode && p.local_shape.size() == 2 &&
            k + 1 < rule.parts.size() && p.local_shape[0] % kFp8Block != 0)
          bad(rw, fmt::format("'{}' has {} rows per TP rank, not whole 128-row blocks: sent as "
                              "block FP8 and fused into '{}' before another part, its last block "
                              "would straddle the next part",
                              name, p.local_shape[0], into));
        owner_[p.order] = self;
        rows_at.emplace_back(&it->first, rows);
        rows += p.local_shape[0];
      }
      rows_total = rows;
      const std::vector<int64_t>& rest = expert0[0]->local_shape;
      uint64_t row = 1;
      for (std::size_t d = 1; d < rest.size(); ++d) row *= static_cast<uint64_t>(rest[d]);
      const uint64_t expert_elems = static_cast<uint64_t>(rows) * row;
      for (const auto& [name, at] : rows_at)
        out.parts.emplace_back(
            *name, static_cast<uint64_t>(e) * expert_elems + static_cast<uint64_t>(at) * row);
    }
    if (stack) {  // every expert the model has: a stack of fewer would leave some unsent
      const std::string next = fill_pattern(rule.parts[0], c, experts);
      if (parts_.count(next))
        bad(rw, fmt::format("'{}' is sent too: '{}' stacks {} experts, the model has more", next,
                            into, experts));
    }
    out.tensor.local_shape = expert0[0]->local_shape;
    out.tensor.local_shape[0] = rows_total;
    if (stack) out.tensor.local_shape.insert(out.tensor.local_shape.begin(), experts);
    composed_.push_back(std::move(out));
  }

  // A part fuses with the first part of its expert (`first`: same dtype, TP split and slice
  // shape past dimension 0) and matches the same part of expert 0 (`same`) exactly.
  static void check_part(const Part& p, const std::string& name, const std::string& into,
                         const Part* same, const Part* first, const std::string& rw) {
    if (p.local_shape.empty())
      bad(rw, fmt::format("'{}' has no dimensions: parts fuse along dimension 0", name));
    if (same != nullptr && (!(p.dtype == same->dtype) || p.local_shape != same->local_shape ||
                            p.tp_dim != same->tp_dim))
      bad(rw, fmt::format("'{}' is {} [{}] per TP rank, the same part of expert 0 {} [{}]: "
                          "stacked experts share their dtypes, shapes and TP splits",
                          name, torch_name(p.dtype), fmt::join(p.local_shape, ", "),
                          torch_name(same->dtype), fmt::join(same->local_shape, ", ")));
    if (first == nullptr) return;
    const auto& f = first->local_shape;
    if (!(p.dtype == first->dtype) || p.local_shape.size() != f.size() ||
        !std::equal(f.begin() + 1, f.end(), p.local_shape.begin() + 1))
      bad(rw, fmt::format("'{}' ({} [{}] per TP rank) does not fuse with the parts before it "
                          "into '{}' ({} [*, {}]): parts share their dtype and every dimension "
                          "but the first",
                          name, torch_name(p.dtype), fmt::join(p.local_shape, ", "), into,
                          torch_name(first->dtype),
                          fmt::join(std::vector<int64_t>(f.begin() + 1, f.end()), ", ")));
    if (p.tp_dim != first->tp_dim)
      bad(rw, fmt::format("'{}' is split by tensor parallelism along {}, the parts before it in "
                          "'{}' along {}: a fused tensor's parts are sliced alike",
                          name, tp_text(p.tp_dim), into, tp_text(first->tp_dim)));
  }

  static std::string tp_text(int dim) {
    return dim < 0 ? std::string("no dimension (whole)") : fmt::format("dimension {}", dim);
  }

  // Ties, after every fuse and stack (whatever their place in the list): a second name of a
  // tensor those made, or of a parameter none took.
  void tie(EngineLayout& out, std::vector<std::string>& origin) {
    for (const auto& [rule, rw] : ties_) {
      const std::string& alias = rule.into;
      const std::string& to = rule.parts[0];
      if (parts_.count(alias))
        bad(rw, fmt::format("the trainer sends '{}' too: a tied name is sent once, as '{}' (leave "
                            "'{}' out of the trainer's parameters)",
                            alias, to, alias));
      if (auto p = parts_.find(to); p != parts_.end() && owner_[p->second.order] >= 0) {
        const Composed& o = composed_[static_cast<std::size_t>(owner_[p->second.order])];
        bad(rw, fmt::format("'{}' is tied to '{}', which is a part of engine parameter '{}' ({}): "
                            "tie to '{}'",
                            alias, to, o.tensor.name, o.rule, o.tensor.name));
      }
      auto it = std::find_if(out.tensors.begin(), out.tensors.end(),
                             [&](const EngineTensor& t) { return t.name == to; });
      if (it == out.tensors.end())
        bad(rw, fmt::format("'{}' is tied to '{}', which is not an engine parameter the plan "
                            "sends",
                            alias, to));
      if (it->tied_to >= 0)
        bad(rw, fmt::format("'{}' is tied to '{}', which is a tied name itself: tie to '{}'", alias,
                            to, out.tensors[static_cast<std::size_t>(it->tied_to)].name));
      const int64_t to_index = it - out.tensors.begin();
      EngineTensor t = *it;
      t.name = alias;
      t.tied_to = to_index;
      out.tensors.push_back(std::move(t));
      origin.push_back(rw);
      ++out.composed;
      // A tied block-FP8 weight's scales are tied alike.
      auto scales = std::find_if(
          out.tensors.begin(), out.tensors.end(),
          [&](const EngineTensor& x) { return x.name == scale_name_of(to) && x.tied_to < 0; });
      if (scales != out.tensors.end()) {
        EngineTensor st = *scales;
        st.name = scale_name_of(alias);
        st.tied_to = scales - out.tensors.begin();
        out.tensors.push_back(std::move(st));
        origin.push_back(rw);
        ++out.composed;
      }
    }
  }

  const std::string what_;
  std::vector<std::string> names_;  // the plan's parameters, in order
  std::unordered_map<std::string, Part> parts_;
  std::vector<int64_t> owner_;  // per parameter: its composed tensor, or -1
  std::vector<Composed> composed_;
  std::vector<std::pair<EngineRule, std::string>> ties_;
  std::size_t name_bytes_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace

std::vector<EngineRule> engine_rules_from_json(const nlohmann::json& j, const std::string& what) {
  if (!j.is_array()) bad(what, "the engine layout must be a list of rules");
  if (j.size() > kMaxRules) bad(what, fmt::format("more than {} rules", kMaxRules));
  std::vector<EngineRule> rules;
  for (std::size_t i = 0; i < j.size(); ++i)
    rules.push_back(read_rule(j[i], fmt::format("{}[{}]", what, i)));
  return rules;
}

nlohmann::json engine_rules_to_json(const std::vector<EngineRule>& rules) {
  auto out = nlohmann::json::array();
  for (const EngineRule& r : rules) {
    if (r.kind == EngineRule::Kind::kTie) {
      out.push_back({{"tie", r.into}, {"to", r.parts.at(0)}});
    } else if (r.kind == EngineRule::Kind::kStack) {
      out.push_back({{"stack", r.into}, {"experts", r.experts}, {"parts", r.parts}});
    } else {
      out.push_back({{"fuse", r.into}, {"parts", r.parts}});
    }
  }
  return out;
}

const EnginePlace& EngineLayout::place_of(const std::string& trainer_name) const {
  auto it = places.find(trainer_name);
  if (it == places.end())
    sdk::fail(WT_ERR_INTERNAL, "the engine layout places no parameter '{}'", trainer_name);
  return it->second;
}

EngineLayout compose_engine(const Plan& plan, const std::vector<EngineRule>& rules,
                            const std::string& what) {
  return compose_engine(planned_params(plan, 0), rules, what);
}

EngineLayout compose_engine(const std::vector<WorkerParam>& sent,
                            const std::vector<EngineRule>& rules, const std::string& what) {
  Composer composer(sent, what);
  for (std::size_t i = 0; i < rules.size(); ++i) composer.apply(rules[i], i);
  return composer.finish();
}

std::vector<WorkerParam> engine_params(const EngineLayout& engine) {
  std::vector<WorkerParam> out;
  out.reserve(engine.tensors.size());
  for (const EngineTensor& t : engine.tensors) out.push_back({t.name, t.dtype, t.local_shape});
  return out;
}

}  // namespace wt::m2n
