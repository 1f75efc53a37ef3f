#include "m2n_plan.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/errors.hpp>
#include <wt/sdk/json_fields.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <xxhash.h>

#include <algorithm>
#include <iterator>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace wt::m2n {
namespace {

[[noreturn]] void bad(const std::string& what, const std::string& why) {
  sdk::fail(WT_ERR_INVALID_ARGUMENT, "{}: {}", what, why);
}

// What one plan may hold: pieces, and holder entries over all of them (memory, and the size of the
// JSON every worker receives). The 1 T layout needs 47,000 pieces.
constexpr uint64_t kMaxPieces = uint64_t{1} << 22;
constexpr uint64_t kMaxHolderEntries = uint64_t{1} << 25;
// Steps: every group reads (and sorts) its holdings once per tensor-parallel rank, about 100 ns a
// step here: 2^24 is under 2 s; the 1 T layout takes under 10^5.
constexpr uint64_t kMaxPlanSteps = uint64_t{1} << 24;

// "'a'" or "'a' (and 41 more of its group)": errors name a parameter, not a group.
std::string named(const std::vector<std::string>& names) {
  if (names.size() <= 1) return fmt::format("'{}'", names.empty() ? "" : names.front());
  return fmt::format("'{}' (and {} more like it)", names.front(), names.size() - 1);
}

uint64_t volume(const Box& b) {
  uint64_t v = 1;
  for (std::size_t d = 0; d < b.lo.size(); ++d) v *= static_cast<uint64_t>(b.hi[d] - b.lo[d]);
  return v;
}

bool inside(const Box& in, const Box& out) {
  for (std::size_t d = 0; d < in.lo.size(); ++d)
    if (in.lo[d] < out.lo[d] || in.hi[d] > out.hi[d] || in.lo[d] >= in.hi[d]) return false;
  return true;
}

void check_tp_divides(const std::vector<std::string>& names, const std::vector<int64_t>& shape,
                      int tp_dim, int tp, const std::string& what) {
  if (tp_dim < 0) return;
  if (tp_dim >= static_cast<int>(shape.size()))
    bad(what, fmt::format("parameter {} has {} dims, but tensor parallelism splits dim {}",
                          named(names), shape.size(), tp_dim));
  if (shape[static_cast<std::size_t>(tp_dim)] % tp != 0)
    bad(what, fmt::format("parameter {}: dim {} of size {} does not divide by tensor_parallel {}",
                          named(names), tp_dim, shape[static_cast<std::size_t>(tp_dim)], tp));
}

// Counts `n` more holder entries in the plan, refusing past its bound.
void count_listed(uint64_t& listed, std::size_t n, const ParamGroup& g, const char* why) {
  listed += n;
  if (listed > kMaxHolderEntries)
    bad("cannot plan", fmt::format("the plan would list more than {} senders over its pieces "
                                   "(at parameter {}){}",
                                   kMaxHolderEntries, named(g.names), why));
}

// Where the holders of [nlo, nhi) along a dimension change: its ends and every slice end inside.
std::vector<int64_t> cut_points(const std::vector<const Held*>& sliced, int64_t nlo, int64_t nhi) {
  std::vector<int64_t> cuts{nlo, nhi};
  for (const Held* h : sliced) {
    if (h->lo > nlo && h->lo < nhi) cuts.push_back(h->lo);
    if (h->hi > nlo && h->hi < nhi) cuts.push_back(h->hi);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

// The pieces of one group for tp rank t: the needed box split where the holdings change.
std::vector<Piece> pieces_of(const ParamGroup& g, int tp, int t, uint64_t& listed) {
  const Box need = needed_box(g.shape, g.tp_dim, tp, t);
  std::vector<int> whole;
  std::vector<const Held*> sliced;
  std::set<int> dims;
  for (const Held& h : *g.holdings) {
    if (h.dim < 0) {
      whole.push_back(h.rank);
    } else {
      sliced.push_back(&h);
      dims.insert(h.dim);
    }
  }
  if (dims.size() > 1)
    bad("cannot plan",
        fmt::format("the trainer ranks hold parameter {} sliced along dims {}: slices of one "
                    "parameter must all run along one dimension",
                    named(g.names), fmt::join(dims, " and ")));
  std::vector<Piece> out;
  std::sort(whole.begin(), whole.end());
  if (dims.empty()) {
    if (whole.empty())
      bad("cannot plan", fmt::format("no trainer rank holds parameter {}", named(g.names)));
    count_listed(listed, whole.size(), g, "");
    out.push_back({t, need, whole, 0});
    return out;
  }
  const int dh = *dims.begin();
  const auto d = static_cast<std::size_t>(dh);
  const std::vector<int64_t> cuts = cut_points(sliced, need.lo[d], need.hi[d]);
  // A sweep along dh: slices join the active set where they start and leave where they end, so
  // FSDP's disjoint shards cost O(ranks log ranks), not ranks squared.
  std::vector<const Held*> by_lo = sliced;
  std::sort(by_lo.begin(), by_lo.end(), [](const Held* a, const Held* b) { return a->lo < b->lo; });
  std::multiset<std::pair<int64_t, int>> ending;  // (hi, rank) of the active slices
  std::multiset<int> active;                      // their ranks
  std::size_t next = 0;
  for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
    const int64_t x = cuts[k], y = cuts[k + 1];
    for (; next < by_lo.size() && by_lo[next]->lo <= x; ++next) {
      ending.insert({by_lo[next]->hi, by_lo[next]->rank});
      active.insert(by_lo[next]->rank);
    }
    while (!ending.empty() && ending.begin()->first <= x) {
      active.erase(active.find(ending.begin()->second));
      ending.erase(ending.begin());
    }
    std::vector<int> holders;
    std::set_union(whole.begin(), whole.end(), active.begin(), active.end(),
                   std::back_inserter(holders));
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    count_listed(listed, holders.size(), g, ": too many ranks slicing too finely");
    if (holders.empty())
      bad("cannot plan", fmt::format("no trainer rank holds elements {}..{} of dim {} of "
                                     "parameter {} (needed by tensor-parallel rank {})",
                                     x, y, dh, named(g.names), t));
    if (!out.empty() && out.back().holders == holders && out.back().box.hi[d] == x) {
      out.back().box.hi[d] = y;  // the same holders on: one piece
      continue;
    }
    Box b = need;
    b.lo[d] = x;
    b.hi[d] = y;
    out.push_back({t, std::move(b), std::move(holders), 0});
  }
  return out;
}

// Adds what each holder of `p` sends: count sends in rotation from `first`.
// `from`: the first send's place in the rotation (member m of replica r is send m * replicas + r).
template <typename Add>
void shares(const Piece& p, uint64_t count, Add add, uint64_t from = 0) {
  const uint64_t n = p.holders.size(), q = count / n, e = count % n;
  for (uint64_t k = 0; k < n; ++k) {
    const uint64_t sends = q + (k < e ? 1 : 0);
    if (sends > 0) add(p.holders[(static_cast<uint64_t>(p.first) + from + k) % n], sends);
  }
}

std::string dtype_text(DLDataType d) {
  return std::string(torch_name(d));
}

}  // namespace

Box needed_box(const std::vector<int64_t>& shape, int tp_dim, int tensor_parallel, int tp_rank) {
  Box b{std::vector<int64_t>(shape.size(), 0), shape};
  if (tp_dim >= 0) {
    const auto d = static_cast<std::size_t>(tp_dim);
    const int64_t part = shape[d] / tensor_parallel;
    b.lo[d] = part * tp_rank;
    b.hi[d] = part * (tp_rank + 1);
  }
  return b;
}

uint64_t piece_bytes(const Piece& p, DLDataType dtype) {
  return volume(p.box) * element_size(dtype);
}

int Plan::sender(const Piece& piece, std::size_t member, int replicas, int replica) {
  const uint64_t i = static_cast<uint64_t>(piece.first) +
                     static_cast<uint64_t>(member) * static_cast<uint64_t>(replicas) +
                     static_cast<uint64_t>(replica);
  return piece.holders[i % piece.holders.size()];
}

Plan compute_plan(const Layout& layout) {
  Plan plan;
  plan.trainer_ranks = layout.trainer_ranks;
  plan.inference = layout.inference;
  const int tp = layout.inference.tensor_parallel, replicas = layout.inference.replicas;
  std::vector<uint64_t> load(static_cast<std::size_t>(layout.trainer_ranks), 0);
  uint64_t listed = 0, pieces = 0, steps = 0;
  for (const ParamGroup& g : layout.groups) {
    check_tp_divides(g.names, g.shape, g.tp_dim, tp, "cannot plan");
    steps += static_cast<uint64_t>(tp + 1) * g.holdings->size();
    if (steps > kMaxPlanSteps)
      bad("cannot plan",
          fmt::format("planning would take more than {} steps (at parameter {}: "
                      "{} groups of parameters, {} trainer ranks' holdings each, "
                      "{} tensor-parallel ranks)",
                      kMaxPlanSteps, named(g.names), layout.groups.size(), g.holdings->size(), tp));
    for (const Held& h : *g.holdings)
      if (h.rank < 0 || h.rank >= layout.trainer_ranks ||
          (h.dim >= 0 && (h.dim >= static_cast<int>(g.shape.size()) || h.lo < 0 || h.lo >= h.hi ||
                          h.hi > g.shape[static_cast<std::size_t>(h.dim)])))
        bad("cannot plan", fmt::format("trainer rank {} claims a holding of parameter {} outside "
                                       "its shape or the trainer ranks",
                                       h.rank, named(g.names)));
    GroupPlan gp{g.names, g.dtype, g.shape, g.tp_dim, {}};
    const uint64_t count = g.names.size() * static_cast<uint64_t>(replicas);
    for (int t = 0; t < tp; ++t) {
      auto cut = pieces_of(g, tp, t, listed);
      pieces += cut.size();
      if (pieces > kMaxPieces)
        bad("cannot plan", fmt::format("the plan would have more than {} pieces (at parameter {})",
                                       kMaxPieces, named(g.names)));
      for (Piece& p : cut) {
        // The holders that send one more than the others start at the least loaded one.
        const std::size_t n = p.holders.size();
        if (count % n != 0) {
          std::size_t best = 0;
          for (std::size_t k = 1; k < n; ++k)
            if (load[static_cast<std::size_t>(p.holders[k])] <
                load[static_cast<std::size_t>(p.holders[best])])
              best = k;
          p.first = static_cast<int64_t>(best);
        }
        const uint64_t bytes = piece_bytes(p, g.dtype);
        shares(p, count, [&](int rank, uint64_t sends) {
          load[static_cast<std::size_t>(rank)] += sends * bytes;
        });
        gp.pieces.push_back(std::move(p));
      }
    }
    plan.groups.push_back(std::move(gp));
  }
  return plan;
}

bool sent_as_fp8(const std::string& name, const std::vector<int64_t>& shape, DLDataType dtype) {
  if (shape.size() < 2 || !(dtype == DLDataType{kDLBfloat, 16, 1})) return false;
  for (const char* keep : {"*embed*", "*lm_head*", "*norm*", "*.gate.weight", "*router*"})
    if (glob_match(keep, name)) return false;
  return true;
}

PlanStats plan_stats(const Plan& plan) {
  PlanStats s;
  s.trainer_bytes.assign(static_cast<std::size_t>(plan.trainer_ranks), 0);
  s.worker_bytes.assign(static_cast<std::size_t>(plan.inference.worker_ranks()), 0);
  const int tp = plan.inference.tensor_parallel, replicas = plan.inference.replicas;
  // Every replica receives the same: counted per tensor-parallel rank, then given to each replica
  // (pieces + workers steps, not pieces * replicas: 2^22 * 65,536 would never end).
  std::vector<uint64_t> per_tp_rank(static_cast<std::size_t>(tp), 0);
  for (const GroupPlan& g : plan.groups) {
    const uint64_t members = g.names.size();
    uint64_t numel = 1;
    for (int64_t d : g.shape) numel *= static_cast<uint64_t>(d);
    s.model_bytes += members * numel * element_size(g.dtype);
    for (const Piece& p : g.pieces) {
      const uint64_t bytes = piece_bytes(p, g.dtype);
      // Each member's sends charged to the holders whose turn they are (Plan::sender).
      shares(p, members * static_cast<uint64_t>(replicas), [&](int rank, uint64_t sends) {
        s.trainer_bytes[static_cast<std::size_t>(rank)] += sends * bytes;
      });
      per_tp_rank[static_cast<std::size_t>(p.tp_rank)] += members * bytes;
      s.pieces += members * static_cast<uint64_t>(replicas);
    }
  }
  for (int r = 0; r < replicas; ++r)
    for (int t = 0; t < tp; ++t)
      s.worker_bytes[static_cast<std::size_t>(r * tp + t)] =
          per_tp_rank[static_cast<std::size_t>(t)];
  return s;
}

nlohmann::json plan_to_json(const Plan& plan) {
  nlohmann::json groups = nlohmann::json::array();
  for (const GroupPlan& g : plan.groups) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const Piece& p : g.pieces)
      pieces.push_back({{"tp", p.tp_rank},
                        {"lo", p.box.lo},
                        {"hi", p.box.hi},
                        {"holders", p.holders},
                        {"first", p.first}});
    groups.push_back({{"names", g.names},
                      {"dtype", dtype_text(g.dtype)},
                      {"shape", g.shape},
                      {"tp_dim", g.tp_dim},
                      {"pieces", std::move(pieces)}});
  }
  return {{"version", 1},
          {"trainer_ranks", plan.trainer_ranks},
          {"replicas", plan.inference.replicas},
          {"tensor_parallel", plan.inference.tensor_parallel},
          {"groups", std::move(groups)}};
}

std::string plan_digest(const Plan& plan) {
  const std::string text = plan_to_json(plan).dump();
  return fmt::format("{:016x}", XXH3_64bits(text.data(), text.size()));
}

namespace {

// A plan a worker was given that it cannot take: named as FieldReader names its own refusals.
[[noreturn]] void bad_plan(const std::string& what, const std::string& why) {
  bad("invalid " + what, why);
}

std::vector<int64_t> get_ints(const nlohmann::json& o, const char* key, const std::string& what,
                              std::size_t size, int64_t lo, int64_t hi) {
  if (!o.contains(key) || !o.at(key).is_array() || o.at(key).size() != size)
    bad_plan(what, fmt::format("'{}' must be an array of {} integers", key, size));
  std::vector<int64_t> v;
  for (const auto& x : o.at(key)) {
    if (!x.is_number_integer() || x.get<int64_t>() < lo || x.get<int64_t>() > hi)
      bad_plan(what,
               fmt::format("every element of '{}' must be an integer in {}..{}", key, lo, hi));
    v.push_back(x.get<int64_t>());
  }
  return v;
}

// A group's names, each a parameter no other group covers.
std::vector<std::string> read_group_names(const nlohmann::json& gj, const std::string& gw,
                                          std::unordered_set<std::string>& seen) {
  if (!gj.is_object() || !gj.contains("names") || !gj.at("names").is_array() ||
      gj.at("names").empty())
    bad_plan(gw, "'names' must be a non-empty array of strings");
  std::vector<std::string> names;
  for (const auto& n : gj.at("names")) {
    if (!n.is_string() || n.get<std::string>().empty()) bad_plan(gw, "every name must be a string");
    if (!seen.insert(n.get<std::string>()).second)
      bad_plan(gw, fmt::format("parameter '{}' is covered twice: it appears in two groups",
                               n.get<std::string>()));
    names.push_back(n.get<std::string>());
  }
  return names;
}

// A group's dtype and shape, its elements bounded at every step (8 factors of 2^40 would wrap
// even 128 bits); returns its element count.
unsigned __int128 read_group_type(const nlohmann::json& gj, const std::string& gw, GroupPlan& g) {
  if (!gj.contains("dtype") || !gj.at("dtype").is_string() ||
      !dtype_from_torch_name(gj.at("dtype").get<std::string>()))
    bad_plan(gw, "'dtype' must name a dtype wt knows");
  g.dtype = *dtype_from_torch_name(gj.at("dtype").get<std::string>());
  if (!gj.contains("shape") || !gj.at("shape").is_array() || gj.at("shape").size() > 8)
    bad_plan(gw, "'shape' must be an array of at most 8 integers");
  g.shape = get_ints(gj, "shape", gw, gj.at("shape").size(), 1, int64_t{1} << 40);
  unsigned __int128 numel = 1;
  for (int64_t d : g.shape) {
    numel *= static_cast<uint64_t>(d);
    if (numel > (uint64_t{1} << 50)) bad_plan(gw, "the shape has more than 2^50 elements");
  }
  return numel;
}

Piece read_piece(const nlohmann::json& pj, const std::string& pw, const GroupPlan& g, int tp,
                 int trainer_ranks) {
  sdk::FieldReader r(pj, pw);
  Piece p;
  p.tp_rank = static_cast<int>(r.get_int_in("tp", 0, tp - 1));
  p.box.lo = get_ints(pj, "lo", pw, g.shape.size(), 0, int64_t{1} << 40);
  p.box.hi = get_ints(pj, "hi", pw, g.shape.size(), 0, int64_t{1} << 40);
  if (!pj.contains("holders") || !pj.at("holders").is_array() || pj.at("holders").empty() ||
      pj.at("holders").size() > static_cast<std::size_t>(trainer_ranks))
    bad_plan(pw, "'holders' must list 1 to trainer_ranks ranks");
  for (int64_t h : get_ints(pj, "holders", pw, pj.at("holders").size(), 0, trainer_ranks - 1)) {
    if (!p.holders.empty() && h <= p.holders.back())
      bad_plan(pw, "'holders' must be ascending, without repeats");
    p.holders.push_back(static_cast<int>(h));
  }
  p.first = r.get_int_in("first", 0, static_cast<int64_t>(p.holders.size()) - 1);
  if (!inside(p.box, needed_box(g.shape, g.tp_dim, tp, p.tp_rank)))
    bad_plan(pw, fmt::format("the piece of parameter {} is empty or outside what tensor-parallel "
                             "rank {} needs",
                             named(g.names), p.tp_rank));
  return p;
}

// Exactly once, in O(P log P): the pieces of tp rank t are slices of its needed box along one
// dimension (as compute_plan cuts them), which laid end to end run from its start to its end.
void check_covered_once(const GroupPlan& g, int t, std::vector<const Piece*>& of, int tp,
                        const std::string& gw) {
  const Box need = needed_box(g.shape, g.tp_dim, tp, t);
  if (of.empty())
    bad_plan(gw, fmt::format("parameter {} is not covered for tensor-parallel rank {}: no piece",
                             named(g.names), t));
  // The one dimension along which the pieces differ from the box (any, for a single piece).
  int cut = -1;
  for (const Piece* p : of)
    for (std::size_t d = 0; d < need.lo.size(); ++d)
      if (p->box.lo[d] != need.lo[d] || p->box.hi[d] != need.hi[d]) {
        if (cut >= 0 && cut != static_cast<int>(d))
          bad_plan(gw, fmt::format("the pieces of parameter {} for tensor-parallel rank {} are not "
                                   "slices along one dimension (dims {} and {} differ)",
                                   named(g.names), t, cut, d));
        cut = static_cast<int>(d);
      }
  const auto overlap = [&] {
    bad_plan(
        gw, fmt::format("parameter {} is covered twice for tensor-parallel rank {}: pieces overlap",
                        named(g.names), t));
  };
  if (cut < 0) {
    if (of.size() > 1) overlap();
    return;
  }
  const auto d = static_cast<std::size_t>(cut);
  std::sort(of.begin(), of.end(),
            [d](const Piece* a, const Piece* b) { return a->box.lo[d] < b->box.lo[d]; });
  const auto gap = [&](int64_t from, int64_t to) {
    bad_plan(gw, fmt::format("parameter {} is not covered for tensor-parallel rank {}: elements "
                             "{}..{} of dim {} are in no piece",
                             named(g.names), t, from, to, d));
  };
  int64_t at = need.lo[d];
  for (const Piece* p : of) {
    if (p->box.lo[d] < at) overlap();
    if (p->box.lo[d] > at) gap(at, p->box.lo[d]);
    at = p->box.hi[d];
  }
  if (at != need.hi[d]) gap(at, need.hi[d]);
}

// Reads a plan's groups in turn, within the bounds on the model's bytes and the plan's pieces.
class GroupsReader {
 public:
  GroupsReader(const Plan& plan, std::string what) : plan_(plan), what_(std::move(what)) {}

  GroupPlan read(const nlohmann::json& gj, const std::string& gw) {
    const int tp = plan_.inference.tensor_parallel;
    GroupPlan g;
    g.names = read_group_names(gj, gw, seen_);
    const unsigned __int128 numel = read_group_type(gj, gw, g);
    model_ += numel * element_size(g.dtype) * g.names.size();
    if (model_ * static_cast<uint64_t>(plan_.inference.worker_ranks()) > (uint64_t{1} << 62))
      bad_plan(what_, "the model times the worker ranks is more than 2^62 bytes");
    g.tp_dim = static_cast<int>(sdk::FieldReader(gj, gw).get_int_in("tp_dim", -1, 7));
    check_tp_divides(g.names, g.shape, g.tp_dim, tp, "invalid " + gw);
    if (!gj.contains("pieces") || !gj.at("pieces").is_array())
      bad_plan(gw, "'pieces' must be an array");
    pieces_ += gj.at("pieces").size();
    if (pieces_ > kMaxPieces) bad_plan(what_, fmt::format("more than {} pieces", kMaxPieces));
    for (std::size_t pi = 0; pi < gj.at("pieces").size(); ++pi)
      g.pieces.push_back(read_piece(gj.at("pieces")[pi], fmt::format("{}, pieces[{}]", gw, pi), g,
                                    tp, plan_.trainer_ranks));
    std::vector<std::vector<const Piece*>> by_tp(static_cast<std::size_t>(tp));
    for (const Piece& p : g.pieces) by_tp[static_cast<std::size_t>(p.tp_rank)].push_back(&p);
    for (int t = 0; t < tp; ++t)
      check_covered_once(g, t, by_tp[static_cast<std::size_t>(t)], tp, gw);
    return g;
  }

 private:
  const Plan& plan_;
  const std::string what_;
  std::unordered_set<std::string> seen_;
  unsigned __int128 model_ = 0;
  uint64_t pieces_ = 0;
};

}  // namespace

Plan plan_from_json(const nlohmann::json& j, const std::string& what) {
  if (!j.is_object()) bad_plan(what, "the plan must be a JSON object");
  // Lenient about keys it does not read (the plan is versioned), strict about those it does.
  sdk::FieldReader r(j, what);
  if (r.get_int_in("version", 1, 1000) != 1)
    bad_plan(what, "plan version is not 1: this worker is older than the trainer's plan");
  Plan plan;
  plan.trainer_ranks = static_cast<int>(r.get_int_in("trainer_ranks", 1, 1 << 16));
  plan.inference.replicas = static_cast<int>(r.get_int_in("replicas", 1, 1 << 16));
  plan.inference.tensor_parallel = static_cast<int>(r.get_int_in("tensor_parallel", 1, 1024));
  const auto& groups = r.get_array("groups");
  if (int64_t{plan.inference.replicas} * plan.inference.tensor_parallel > (1 << 16))
    bad_plan(what, "more than 65536 worker ranks");
  GroupsReader reader(plan, what);
  for (std::size_t gi = 0; gi < groups.size(); ++gi)
    plan.groups.push_back(reader.read(groups[gi], fmt::format("{}, groups[{}]", what, gi)));
  return plan;
}

std::vector<WorkerParam> planned_params(const Plan& plan, int tp_rank) {
  std::vector<WorkerParam> out;
  for (const GroupPlan& g : plan.groups) {
    const Box need = needed_box(g.shape, g.tp_dim, plan.inference.tensor_parallel, tp_rank);
    std::vector<int64_t> local(g.shape.size());
    for (std::size_t d = 0; d < local.size(); ++d) local[d] = need.hi[d] - need.lo[d];
    for (const std::string& name : g.names) out.push_back({name, g.dtype, local, g.tp_dim});
  }
  return out;
}

void check_worker(const Plan& plan, int worker_rank, const std::vector<WorkerParam>& params) {
  if (worker_rank < 0 || worker_rank >= plan.inference.worker_ranks())
    bad("the m2n plan does not fit this worker",
        fmt::format("worker rank {} is not in 0..{}", worker_rank,
                    plan.inference.worker_ranks() - 1));
  const int t = worker_rank % plan.inference.tensor_parallel;
  check_held_params(planned_params(plan, t), params, worker_rank, t);
}

void check_held_params(const std::vector<WorkerParam>& expected,
                       const std::vector<WorkerParam>& params, int worker_rank, int tp_rank) {
  std::unordered_map<std::string_view, const WorkerParam*> held;
  for (const WorkerParam& p : params) held[p.name] = &p;
  const std::string what = fmt::format("the m2n plan does not fit worker rank {}", worker_rank);
  for (const WorkerParam& e : expected) {
    auto it = held.find(e.name);
    if (it == held.end())
      bad(what,
          fmt::format("the plan sends parameter '{}', which this worker does not hold", e.name));
    const WorkerParam& w = *it->second;
    if (!(w.dtype == e.dtype) || w.local_shape != e.local_shape)
      bad(what, fmt::format("parameter '{}' is planned as {} [{}] for tensor-parallel rank {}, "
                            "but this worker holds it as {} [{}]",
                            e.name, dtype_text(e.dtype), fmt::join(e.local_shape, ", "), tp_rank,
                            dtype_text(w.dtype), fmt::join(w.local_shape, ", ")));
  }
  if (expected.size() == params.size()) return;
  std::unordered_set<std::string_view> in_plan;
  for (const WorkerParam& e : expected) in_plan.insert(e.name);
  std::unordered_set<std::string_view> seen_here;
  for (const WorkerParam& p : params) {
    if (!seen_here.insert(p.name).second)
      bad(what, fmt::format("this worker lists parameter '{}' twice", p.name));
    if (!in_plan.count(p.name))
      bad(what, fmt::format("this worker holds parameter '{}', which no plan entry covers: "
                            "it would keep stale weights",
                            p.name));
  }
}

}  // namespace wt::m2n
