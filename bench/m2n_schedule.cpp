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
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double seconds(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"m2n: the plan and each rank's schedule at scale"};
  std::string layout_path = std::string(WT_SOURCE_DIR) + "/configs/layouts/kimi-k2-1t.json";
  int rounds = 3;
  app.add_option("--layout", layout_path, "a layout, as `wt plan --layout` reads it");
  app.add_option("--rounds", rounds, "rounds of worker bookkeeping to time");
  CLI11_PARSE(app, argc, argv);
  using namespace wt::m2n;

  nlohmann::json layout_json;
  Layout layout;
  Plan plan;
  const double t_plan = seconds([&] {
    layout_json = wt::yaml_to_json(wt::load_yaml_file(layout_path), layout_path);
    layout = layout_from_json(layout_json, "layout " + layout_path);
    plan = compute_plan(layout);
  });
  std::vector<std::string> names;
  for (const auto& g : plan.groups) names.insert(names.end(), g.names.begin(), g.names.end());
  const auto workers =
      static_cast<std::size_t>(plan.inference.replicas * plan.inference.tensor_parallel);
  const auto trainers = static_cast<std::size_t>(plan.trainer_ranks);
  std::unique_ptr<PlanIndex> index;
  const double t_index = seconds([&] { index = std::make_unique<PlanIndex>(plan); });

  // What each trainer rank declares at init (its holdings, as the gather carries them), and the
  // sum every rank receives.
  uint64_t gathered = 0, declared_by_0 = 0;
  std::vector<std::string> declarations;
  std::vector<wt::ParamMeta> model;  // trainer rank 0's
  const double t_declare = seconds([&] {
    for (int rank = 0; rank < plan.trainer_ranks; ++rank) {
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
      declarations.push_back(holdings_declaration(meta, rank, plan.trainer_ranks).dump());
      if (rank == 0) {
        declared_by_0 = declarations.back().size();
        model = std::move(meta);
      }
      gathered += declarations.back().size();
    }
  });

  // What trainer rank 0 then does with them: reads every rank's declaration, groups the model by
  // dtype, shape, holdings and TP rule, and plans. Its groups may merge some the layout file kept
  // apart (two tensors of one shape under different rules): a plan as valid, checked here.
  Plan from_ranks;
  const double t_from_ranks = seconds([&] {
    std::vector<RankHoldings> per_rank;
    for (int rank = 0; rank < plan.trainer_ranks; ++rank)
      per_rank.push_back(RankHoldings::from_declaration(
          nlohmann::json::parse(declarations[static_cast<std::size_t>(rank)]), rank,
          plan.trainer_ranks, model));
    std::vector<TpRule> rules;
    for (const auto& r : layout_json.at("inference").at("rules"))
      rules.push_back({r.at("match").get<std::string>(), r.at("dim").get<int>()});
    from_ranks = compute_plan(layout_from_holdings(model, per_rank, plan.inference, rules));
  });
  bool valid = true;
  try {
    plan_from_json(plan_to_json(from_ranks), "the plan from the declarations");
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}\n", e.what());
    valid = false;
  }

  std::vector<Transfer> sends, receives;
  std::vector<Message> send_messages, receive_messages;
  RoundTable send_table, receive_table;
  // Trainer rank 0's tensors as its source holds them (compact slices), and worker rank 0's TP
  // slices.
  // (in the order of the plan's names, which the transfers index)
  {
    std::unordered_map<std::string, std::size_t> at;
    for (std::size_t i = 0; i < model.size(); ++i) at.emplace(model[i].name, i);
    std::vector<wt::ParamMeta> ordered;
    for (const auto& n : names) ordered.push_back(model[at.at(n)]);
    model = std::move(ordered);
  }
  std::vector<std::vector<int64_t>> compact;
  for (const auto& m : model) compact.push_back(compact_strides(m.local_shape()));
  std::vector<Box> needed;
  std::vector<std::vector<int64_t>> shapes, strides;
  std::vector<DLDataType> dtypes;
  for (const auto& g : plan.groups)
    for (std::size_t k = 0; k < g.names.size(); ++k) {
      const int tp = plan.inference.tensor_parallel;
      needed.push_back(needed_box(g.shape, g.tp_dim, tp, 0));
      std::vector<int64_t> shape;
      for (std::size_t d = 0; d < g.shape.size(); ++d)
        shape.push_back(needed.back().hi[d] - needed.back().lo[d]);
      strides.push_back(compact_strides(shape));
      shapes.push_back(std::move(shape));
      dtypes.push_back(g.dtype);
    }
  const double t_trainer = seconds([&] {
    sends = sends_of(plan, *index, names, 0);
    pair_digests(sends, names, workers);
    send_messages = messages_of(sends, workers);
  });
  const double t_send_table = seconds([&] {
    send_table = compile_table(
        sends, send_messages, names,
        [&](const Transfer& t) {
          return sender_geometry(t, model[t.param], compact[t.param], compact[t.param]);
        },
        "to", "worker rank");
  });
  const double t_worker = seconds([&] {
    receives = receives_of(plan, *index, names, 0);
    pair_digests(receives, names, trainers);
    receive_messages = messages_of(receives, trainers);
  });
  const double t_receive_table = seconds([&] {
    receive_table = compile_table(
        receives, receive_messages, names,
        [&](const Transfer& t) {
          return receiver_geometry(t, dtypes[t.param], needed[t.param], shapes[t.param],
                                   strides[t.param]);
        },
        "from", "trainer rank");
  });
  // A round's bookkeeping on a kept table: the checks that it still applies (the trainer: each
  // tensor's strides against those the table assumed; the worker: the round's names), then the
  // walk that posts (each message's slot, staging room for the packed ones, handed back as the
  // oldest would be waited for).
  auto walk = [](const RoundTable& table) {
    StagingRing ring;
    ring.reset(staging_bytes(table), table.packed_messages);
    uint64_t slots = 0;
    for (const TableMessage& m : table.messages) {
      slots += slot(1, m.number);
      if (m.in_place) continue;
      while (ring.take(m.bytes) < 0) ring.give_back_oldest();
    }
    return slots;
  };
  std::vector<double> t_trainer_round, t_worker_round;
  for (int r = 0; r < rounds; ++r) {
    const auto round_strides = compact;
    t_trainer_round.push_back(seconds([&] {
      bool same = true;
      for (std::size_t p = 0; p < round_strides.size(); ++p)
        same = same && round_strides[p] == compact[p];
      volatile uint64_t sink = same ? walk(send_table) : 0;
      (void)sink;
    }));
    const std::vector<std::string> round_names = names;
    t_worker_round.push_back(seconds([&] {
      const bool same = std::equal(round_names.begin(), round_names.end(), names.begin());
      volatile uint64_t sink = same ? walk(receive_table) : 0;
      (void)sink;
    }));
  }
  std::sort(t_trainer_round.begin(), t_trainer_round.end());
  std::sort(t_worker_round.begin(), t_worker_round.end());
  const double trainer_round = t_trainer_round[t_trainer_round.size() / 2];
  const double worker_round = t_worker_round[t_worker_round.size() / 2];
  // Each round, before the keeping: the worker's pieces, its frames' digests and its messages
  // again.
  std::vector<double> t_again;
  for (int r = 0; r < rounds; ++r) {
    t_again.push_back(seconds([&] {
      const auto again = receives_of(plan, *index, names, 0);
      pair_digests(again, names, trainers);
      messages_of(again, trainers);
    }));
  }
  std::sort(t_again.begin(), t_again.end());
  const double again = t_again[t_again.size() / 2];

  fmt::print("layout {}: {} parameters in {} groups, {} trainer ranks -> {} x TP {}\n", layout_path,
             names.size(), plan.groups.size(), plan.trainer_ranks, plan.inference.replicas,
             plan.inference.tensor_parallel);
  fmt::print("{:<44} {:>10.3f} s\n", "plan (read the layout, compute)", t_plan);
  fmt::print("{:<44} {:>10.3f} s\n", "plan index", t_index);
  auto table_line = [](const char* what, double t, const RoundTable& table) {
    std::size_t bytes = table.copies.size() * sizeof(CompiledCopy) +
                        table.walks.dims.size() * sizeof(CopyWalks::Dim) +
                        table.messages.size() * sizeof(TableMessage);
    for (const auto& m : table.messages) bytes += m.what.capacity();
    fmt::print(
        "{:<44} {:>10.3f} s   {} messages, {} in place, {} copies, {:.1f} GB packed; the table "
        "{:.0f} MB\n",
        what, t, table.messages.size(), table.messages.size() - table.packed_messages,
        table.copies.size(), table.packed_bytes / 1e9, bytes / 1e6);
  };
  fmt::print("{:<44} {:>10.3f} s   {} pieces, {} messages\n", "trainer rank 0: its schedule",
             t_trainer, sends.size(), send_messages.size());
  table_line("trainer rank 0: its round table", t_send_table, send_table);
  fmt::print("{:<44} {:>10.3f} s   {} pieces, {} messages\n", "worker rank 0: its schedule",
             t_worker, receives.size(), receive_messages.size());
  table_line("worker rank 0: its round table", t_receive_table, receive_table);
  fmt::print("{:<44} {:>10.3f} s\n", "worker rank 0, per round, worked out again", again);
  fmt::print("{:<44} {:>10.3f} ms\n", "trainer rank 0, per round, on its table",
             trainer_round * 1e3);
  fmt::print("{:<44} {:>10.3f} ms\n", "worker rank 0, per round, on its table", worker_round * 1e3);
  fmt::print("{:<44} {:>10.2f} MB   (trainer rank 0 declares {} bytes; {:.1f} s to write all)\n",
             "init gather, received by every rank", gathered / 1e6, declared_by_0, t_declare);
  fmt::print("{:<44} {:>10.3f} s   {} groups, every parameter covered once: {}\n",
             "trainer rank 0: the declarations to the plan", t_from_ranks, from_ranks.groups.size(),
             valid ? "yes" : "NO");
  fmt::print("m2n init gather: {:.2f} MB received per rank, goal <= 4 MB\n", gathered / 1e6);
  const double trainer_compile = t_from_ranks + t_index + t_trainer + t_send_table;
  const double worker_compile = t_index + t_worker + t_receive_table;
  fmt::print(
      "m2n tables: compile {:.2f} s (trainer rank 0), {:.2f} s (worker rank 0), goal <= 5 s per "
      "rank; per-round bookkeeping {:.1f} ms (trainer rank 0), {:.1f} ms (worker rank 0; {:.0f} ms "
      "worked out again), goal <= 50 ms\n",
      trainer_compile, worker_compile, trainer_round * 1e3, worker_round * 1e3, again * 1e3);
  return valid ? 0 : 1;
}
