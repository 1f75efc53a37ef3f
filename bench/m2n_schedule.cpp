// m2n at the scale it plans for, before a byte moves: for a layout (by default the 1 T-parameter
// MoE from 256 FSDP ranks into 16 replicas of TP 8, configs/layouts/kimi-k2-1t.json), what the
// plan costs to compute, what trainer rank 0 and worker rank 0 each work out from it at init (their
// pieces, how the pieces travel, the frames' digests), and what worker rank 0 does again each
// round before its first byte: the same work when the round names other tensors, a comparison of
// the names when it names the same ones (a full resync), as the worker now keeps its schedule.
// Also what the init's gather moves: the holdings every trainer rank declares, and what each rank
// receives of all of them.
//
//   build/bin/wt_bench_m2n_schedule [--layout configs/layouts/kimi-k2-1t.json] [--rounds 3]
#include "m2n_schedule.hpp"
#include "m2n_holdings.hpp"
#include "m2n_layout.hpp"
#include "m2n_plan.hpp"

#include <wt/services/yaml_json.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <string>
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
  const double t_trainer = seconds([&] {
    sends = sends_of(plan, *index, names, 0);
    pair_digests(sends, names, workers);
    send_messages = messages_of(sends, workers);
  });
  const double t_worker = seconds([&] {
    receives = receives_of(plan, *index, names, 0);
    pair_digests(receives, names, trainers);
    receive_messages = messages_of(receives, trainers);
  });
  // Each round, before the keeping: the worker's pieces, its frames' digests and its messages
  // again.
  std::vector<double> t_again, t_kept;
  for (int r = 0; r < rounds; ++r) {
    t_again.push_back(seconds([&] {
      const auto again = receives_of(plan, *index, names, 0);
      pair_digests(again, names, trainers);
      messages_of(again, trainers);
    }));
    // With it: the round's names against those the schedule was made for.
    const std::vector<std::string> round_names = names;
    t_kept.push_back(seconds([&] {
      volatile bool same = std::equal(round_names.begin(), round_names.end(), names.begin());
      (void)same;
    }));
  }
  std::sort(t_again.begin(), t_again.end());
  std::sort(t_kept.begin(), t_kept.end());
  const double again = t_again[t_again.size() / 2], kept = t_kept[t_kept.size() / 2];

  fmt::print("layout {}: {} parameters in {} groups, {} trainer ranks -> {} x TP {}\n", layout_path,
             names.size(), plan.groups.size(), plan.trainer_ranks, plan.inference.replicas,
             plan.inference.tensor_parallel);
  fmt::print("{:<44} {:>10.3f} s\n", "plan (read the layout, compute)", t_plan);
  fmt::print("{:<44} {:>10.3f} s\n", "plan index", t_index);
  fmt::print("{:<44} {:>10.3f} s   {} pieces, {} messages\n", "trainer rank 0: its schedule",
             t_trainer, sends.size(), send_messages.size());
  fmt::print("{:<44} {:>10.3f} s   {} pieces, {} messages\n", "worker rank 0: its schedule",
             t_worker, receives.size(), receive_messages.size());
  fmt::print("{:<44} {:>10.3f} s\n", "worker rank 0, per round, worked out again", again);
  fmt::print("{:<44} {:>10.3f} ms\n", "worker rank 0, per round, kept (names compared)",
             kept * 1e3);
  fmt::print("{:<44} {:>10.2f} MB   (trainer rank 0 declares {} bytes; {:.1f} s to write all)\n",
             "init gather, received by every rank", gathered / 1e6, declared_by_0, t_declare);
  fmt::print("{:<44} {:>10.3f} s   {} groups, every parameter covered once: {}\n",
             "trainer rank 0: the declarations to the plan", t_from_ranks, from_ranks.groups.size(),
             valid ? "yes" : "NO");
  fmt::print("m2n init gather: {:.2f} MB received per rank, goal <= 4 MB\n", gathered / 1e6);
  fmt::print(
      "m2n schedule: compile {:.2f} s (trainer rank 0), {:.2f} s (worker rank 0), goal <= 5 "
      "s per rank; worker per-round bookkeeping {:.1f} ms (was {:.0f} ms), goal <= 50 ms\n",
      t_from_ranks + t_index + t_trainer, t_index + t_worker, kept * 1e3, again * 1e3);
  return valid ? 0 : 1;
}
