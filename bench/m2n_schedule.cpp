// m2n at the scale it plans for, before a byte moves: for a layout (by default the 1 T-parameter
// MoE from 256 FSDP ranks into 16 replicas of TP 8, configs/layouts/kimi-k2-1t.json), what the
// plan costs to compute, what trainer rank 0 and worker rank 0 each work out from it at init (their
// pieces, how the pieces travel, the frames' digests), and what worker rank 0 does again each
// round before its first byte: the same work when the round names other tensors, a comparison of
// the names when it names the same ones (a full resync), as the worker now keeps its schedule.
// Each rank's schedule is then compiled into its round table (round_table.hpp), and a round only
// executes the table: the bench times compiling the tables and walking one as a round does before
// and between its posts (slots, staging room; the posts themselves are the transport's).
// Also what the init's gather moves: the holdings every trainer rank declares, and what each rank
// receives of all of them.
//
//   build/bin/wt_bench_m2n_schedule [--layout configs/layouts/kimi-k2-1t.json] [--rounds 3]
#include "m2n_schedule.hpp"
#include "box_copy.hpp"
#include "m2n_holdings.hpp"
#include "m2n_layout.hpp"
#include "m2n_plan.hpp"
#include "m2n_wire.hpp"
#include "round_table.hpp"

#include <wt/services/yaml_json.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using namespace wt::m2n;

template <typename F>
double seconds(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Args {
  std::string layout_path = std::string(WT_SOURCE_DIR) + "/configs/layouts/kimi-k2-1t.json";
  int rounds = 3;
};

void add_options(CLI::App& app, Args& a) {
  app.add_option("--layout", a.layout_path, "a layout, as `wt plan --layout` reads it");
  app.add_option("--rounds", a.rounds, "rounds of worker bookkeeping to time");
}

// The layout, read and planned, and the plan's index.
struct Planned {
  nlohmann::json layout_json;
  Layout layout;
  Plan plan;
  std::vector<std::string> names;  // the plan's parameters, group after group
  std::unique_ptr<PlanIndex> index;
  double t_plan = 0, t_index = 0;
};

Planned plan_layout(const std::string& layout_path) {
  Planned p;
  p.t_plan = seconds([&] {
    p.layout_json = wt::yaml_to_json(wt::load_yaml_file(layout_path), layout_path);
    p.layout = layout_from_json(p.layout_json, "layout " + layout_path);
    p.plan = compute_plan(p.layout);
  });
  for (const auto& g : p.plan.groups) p.names.insert(p.names.end(), g.names.begin(), g.names.end());
  p.t_index = seconds([&] { p.index = std::make_unique<PlanIndex>(p.plan); });
  return p;
}

// Trainer rank `rank`'s metadata: every parameter of the layout, as the rank holds it.
std::vector<wt::ParamMeta> trainer_rank_meta(const Layout& layout, int rank) {
  std::vector<wt::ParamMeta> meta;
  for (const auto& g : layout.groups) {
    const Held* held = nullptr;
    for (const Held& h : *g.holdings)
      if (h.rank == rank) held = &h;
    for (const auto& name : g.names) {
      wt::ParamMeta m{name, g.dtype, g.shape};
      if (held != nullptr && held->dim >= 0) {
        m.shard_dim = held->dim;
        m.shard_offset = held->lo;
        m.shard_length = held->hi - held->lo;
      } else if (held == nullptr) {  // holds nothing of it: an empty slice
        m.shard_dim = 0;
        m.shard_offset = g.shape[0];
      }
      meta.push_back(std::move(m));
    }
  }
  return meta;
}

// What each trainer rank declares at init (its holdings, as the gather carries them), and the
// sum every rank receives.
struct Declared {
  uint64_t gathered = 0, declared_by_0 = 0;
  std::vector<std::string> declarations;
  std::vector<wt::ParamMeta> model;  // trainer rank 0's
  double t_declare = 0;
};

Declared declare_holdings(const Planned& p) {
  Declared d;
  d.t_declare = seconds([&] {
    for (int rank = 0; rank < p.plan.trainer_ranks; ++rank) {
      std::vector<wt::ParamMeta> meta = trainer_rank_meta(p.layout, rank);
      d.declarations.push_back(holdings_declaration(meta, rank, p.plan.trainer_ranks).dump());
      if (rank == 0) {
        d.declared_by_0 = d.declarations.back().size();
        d.model = std::move(meta);
      }
      d.gathered += d.declarations.back().size();
    }
  });
  return d;
}

// What trainer rank 0 then does with them: reads every rank's declaration, groups the model by
// dtype, shape, holdings and TP rule, and plans. Its groups may merge some the layout file kept
// apart (two tensors of one shape under different rules): a plan as valid, checked here.
struct FromRanks {
  Plan plan;
  double t_from_ranks = 0;
  bool valid = true;
};

FromRanks plan_from_declarations(const Planned& p, const Declared& d) {
  FromRanks f;
  f.t_from_ranks = seconds([&] {
    std::vector<RankHoldings> per_rank;
    for (int rank = 0; rank < p.plan.trainer_ranks; ++rank)
      per_rank.push_back(RankHoldings::from_declaration(
          nlohmann::json::parse(d.declarations[static_cast<std::size_t>(rank)]), rank,
          p.plan.trainer_ranks, d.model));
    std::vector<TpRule> rules;
    for (const auto& r : p.layout_json.at("inference").at("rules"))
      rules.push_back({r.at("match").get<std::string>(), r.at("dim").get<int>()});
    f.plan = compute_plan(layout_from_holdings(d.model, per_rank, p.plan.inference, rules));
  });
  try {
    plan_from_json(plan_to_json(f.plan), "the plan from the declarations");
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}\n", e.what());
    f.valid = false;
  }
  return f;
}

// Trainer rank 0's tensors as its source holds them (compact slices), and worker rank 0's TP
// slices.
struct RankZeroTensors {
  std::vector<wt::ParamMeta> model;  // in the order of the plan's names, which transfers index
  std::vector<std::vector<int64_t>> compact;
  std::vector<Box> needed;
  std::vector<std::vector<int64_t>> shapes, strides;
  std::vector<DLDataType> dtypes;
};

RankZeroTensors rank_zero_tensors(const Planned& p, std::vector<wt::ParamMeta> model) {
  RankZeroTensors z;
  {
    std::unordered_map<std::string, std::size_t> at;
    for (std::size_t i = 0; i < model.size(); ++i) at.emplace(model[i].name, i);
    std::vector<wt::ParamMeta> ordered;
    for (const auto& n : p.names) ordered.push_back(model[at.at(n)]);
    z.model = std::move(ordered);
  }
  for (const auto& m : z.model) z.compact.push_back(compact_strides(m.local_shape()));
  for (const auto& g : p.plan.groups)
    for (std::size_t k = 0; k < g.names.size(); ++k) {
      const int tp = p.plan.inference.tensor_parallel;
      z.needed.push_back(needed_box(g.shape, g.tp_dim, tp, 0));
      std::vector<int64_t> shape;
      for (std::size_t d = 0; d < g.shape.size(); ++d)
        shape.push_back(z.needed.back().hi[d] - z.needed.back().lo[d]);
      z.strides.push_back(compact_strides(shape));
      z.shapes.push_back(std::move(shape));
      z.dtypes.push_back(g.dtype);
    }
  return z;
}

// What trainer rank 0 and worker rank 0 each work out at init: their pieces, how the pieces
// travel, the frames' digests, and the round tables compiled from them.
struct Schedules {
  std::vector<Transfer> sends, receives;
  std::vector<Message> send_messages, receive_messages;
  RoundTable send_table, receive_table;
  double t_trainer = 0, t_send_table = 0, t_worker = 0, t_receive_table = 0;
};

Schedules schedule_rank_zero(const Planned& p, const RankZeroTensors& z) {
  const auto workers =
      static_cast<std::size_t>(p.plan.inference.replicas * p.plan.inference.tensor_parallel);
  const auto trainers = static_cast<std::size_t>(p.plan.trainer_ranks);
  Schedules s;
  s.t_trainer = seconds([&] {
    s.sends = sends_of(p.plan, *p.index, p.names, 0);
    pair_digests(s.sends, p.names, workers);
    s.send_messages = messages_of(s.sends, workers);
  });
  s.t_send_table = seconds([&] {
    s.send_table = compile_table(
        s.sends, s.send_messages, p.names,
        [&](const Transfer& t) {
          return sender_geometry(t, z.model[t.param], z.compact[t.param], z.compact[t.param]);
        },
        "to", "worker rank");
  });
  s.t_worker = seconds([&] {
    s.receives = receives_of(p.plan, *p.index, p.names, 0);
    pair_digests(s.receives, p.names, trainers);
    s.receive_messages = messages_of(s.receives, trainers);
  });
  s.t_receive_table = seconds([&] {
    s.receive_table = compile_table(
        s.receives, s.receive_messages, p.names,
        [&](const Transfer& t) {
          return receiver_geometry(t, z.dtypes[t.param], z.needed[t.param], z.shapes[t.param],
                                   z.strides[t.param]);
        },
        "from", "trainer rank");
  });
  return s;
}

// A round's walk of a kept table, the part that posts: each message's slot, staging room for the
// packed ones (handed back as the oldest would be waited for).
uint64_t walk_round_table(const RoundTable& table) {
  StagingRing ring;
  ring.reset(staging_bytes(table), table.packed_messages);
  uint64_t slots = 0;
  for (const TableMessage& m : table.messages) {
    slots += slot(1, m.number);
    if (m.in_place) continue;
    while (ring.take(m.bytes) < 0) ring.give_back_oldest();
  }
  return slots;
}

// The medians, in seconds, of a round's bookkeeping on each rank's kept table, and of the worker's
// schedule worked out again instead.
struct RoundCosts {
  double trainer_round = 0, worker_round = 0, again = 0;
};

// A round's bookkeeping on a kept table: the checks that it still applies (the trainer: each
// tensor's strides against those the table assumed; the worker: the round's names), then the walk
// that posts.
RoundCosts time_rounds_on_tables(const Planned& p, const RankZeroTensors& z, const Schedules& s,
                                 int rounds) {
  std::vector<double> t_trainer_round, t_worker_round;
  for (int r = 0; r < rounds; ++r) {
    const auto round_strides = z.compact;
    t_trainer_round.push_back(seconds([&] {
      bool same = true;
      for (std::size_t i = 0; i < round_strides.size(); ++i)
        same = same && round_strides[i] == z.compact[i];
      volatile uint64_t sink = same ? walk_round_table(s.send_table) : 0;
      (void)sink;
    }));
    const std::vector<std::string> round_names = p.names;
    t_worker_round.push_back(seconds([&] {
      const bool same = std::equal(round_names.begin(), round_names.end(), p.names.begin());
      volatile uint64_t sink = same ? walk_round_table(s.receive_table) : 0;
      (void)sink;
    }));
  }
  RoundCosts c;
  c.trainer_round = median(std::move(t_trainer_round));
  c.worker_round = median(std::move(t_worker_round));
  return c;
}

// Each round, before the keeping: the worker's pieces, its frames' digests and its messages
// again.
double time_worked_out_again(const Planned& p, int rounds) {
  const auto trainers = static_cast<std::size_t>(p.plan.trainer_ranks);
  std::vector<double> t_again;
  for (int r = 0; r < rounds; ++r) {
    t_again.push_back(seconds([&] {
      const auto again = receives_of(p.plan, *p.index, p.names, 0);
      pair_digests(again, p.names, trainers);
      messages_of(again, trainers);
    }));
  }
  return median(std::move(t_again));
}

void print_table_line(const char* what, double t, const RoundTable& table) {
  std::size_t bytes = table.copies.size() * sizeof(CompiledCopy) +
                      table.walks.dims.size() * sizeof(CopyWalks::Dim) +
                      table.messages.size() * sizeof(TableMessage);
  for (const auto& m : table.messages) bytes += m.what.capacity();
  fmt::print(
      "{:<44} {:>10.3f} s   {} messages, {} in place, {} copies, {:.1f} GB packed; the table "
      "{:.0f} MB\n",
      what, t, table.messages.size(), table.messages.size() - table.packed_messages,
      table.copies.size(), table.packed_bytes / 1e9, bytes / 1e6);
}

void print_report(const std::string& layout_path, const Planned& p, const Declared& d,
                  const FromRanks& f, const Schedules& s, const RoundCosts& c) {
  fmt::print("layout {}: {} parameters in {} groups, {} trainer ranks -> {} x TP {}\n", layout_path,
             p.names.size(), p.plan.groups.size(), p.plan.trainer_ranks, p.plan.inference.replicas,
             p.plan.inference.tensor_parallel);
  fmt::print("{:<44} {:>10.3f} s\n", "plan (read the layout, compute)", p.t_plan);
  fmt::print("{:<44} {:>10.3f} s\n", "plan index", p.t_index);
  fmt::print("{:<44} {:>10.3f} s   {} pieces, {} messages\n", "trainer rank 0: its schedule",
             s.t_trainer, s.sends.size(), s.send_messages.size());
  print_table_line("trainer rank 0: its round table", s.t_send_table, s.send_table);
  fmt::print("{:<44} {:>10.3f} s   {} pieces, {} messages\n", "worker rank 0: its schedule",
             s.t_worker, s.receives.size(), s.receive_messages.size());
  print_table_line("worker rank 0: its round table", s.t_receive_table, s.receive_table);
  fmt::print("{:<44} {:>10.3f} s\n", "worker rank 0, per round, worked out again", c.again);
  fmt::print("{:<44} {:>10.3f} ms\n", "trainer rank 0, per round, on its table",
             c.trainer_round * 1e3);
  fmt::print("{:<44} {:>10.3f} ms\n", "worker rank 0, per round, on its table",
             c.worker_round * 1e3);
  fmt::print("{:<44} {:>10.2f} MB   (trainer rank 0 declares {} bytes; {:.1f} s to write all)\n",
             "init gather, received by every rank", d.gathered / 1e6, d.declared_by_0, d.t_declare);
  fmt::print("{:<44} {:>10.3f} s   {} groups, every parameter covered once: {}\n",
             "trainer rank 0: the declarations to the plan", f.t_from_ranks, f.plan.groups.size(),
             f.valid ? "yes" : "NO");
  fmt::print("m2n init gather: {:.2f} MB received per rank, goal <= 4 MB\n", d.gathered / 1e6);
  const double trainer_compile = f.t_from_ranks + p.t_index + s.t_trainer + s.t_send_table;
  const double worker_compile = p.t_index + s.t_worker + s.t_receive_table;
  fmt::print(
      "m2n tables: compile {:.2f} s (trainer rank 0), {:.2f} s (worker rank 0), goal <= 5 s per "
      "rank; per-round bookkeeping {:.1f} ms (trainer rank 0), {:.1f} ms (worker rank 0; {:.0f} ms "
      "worked out again), goal <= 50 ms\n",
      trainer_compile, worker_compile, c.trainer_round * 1e3, c.worker_round * 1e3, c.again * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"m2n: the plan and each rank's schedule at scale"};
  Args a;
  add_options(app, a);
  CLI11_PARSE(app, argc, argv);

  const Planned p = plan_layout(a.layout_path);
  Declared d = declare_holdings(p);
  const FromRanks f = plan_from_declarations(p, d);
  const RankZeroTensors z = rank_zero_tensors(p, std::move(d.model));
  const Schedules s = schedule_rank_zero(p, z);
  RoundCosts c = time_rounds_on_tables(p, z, s, a.rounds);
  c.again = time_worked_out_again(p, a.rounds);
  print_report(a.layout_path, p, d, f, s, c);
  return f.valid ? 0 : 1;
}
