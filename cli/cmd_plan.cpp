// `wt plan LAYOUT`: the m2n plan of a layout (parameters, trainer holdings, inference layout) and
// what it costs on given links: bytes per trainer and per worker rank, the busiest link and the
// makespan, next to trainer rank 0 gathering and broadcasting the same model (the nccl backend).
#include "commands.hpp"

#include <wt/dtype.hpp>
#include <wt/error.hpp>
#include <wt/sdk/errors.hpp>
#include <wt/services/yaml_json.hpp>

#include "block_fp8_layout.hpp"
#include "engine_layout.hpp"
#include "m2n_plan.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>

namespace wt::cli {
namespace {

struct Extremes {
  uint64_t min = 0, max = 0;
  std::size_t busiest = 0;
};

Extremes extremes(const std::vector<uint64_t>& v) {
  Extremes e;
  if (v.empty()) return e;
  auto hi = std::max_element(v.begin(), v.end());  // the first of the busiest
  e.min = *std::min_element(v.begin(), v.end());
  e.max = *hi;
  e.busiest = static_cast<std::size_t>(hi - v.begin());
  return e;
}

double gb(uint64_t bytes) {
  return static_cast<double>(bytes) / 1e9;
}

struct PlanOpts {
  std::string layout, write_plan;
  double trainer_gbs = 50, worker_gbs = 50, anchor_s = 0;
  bool json = false;
  std::string wire_dtype = "as-held";
  int replicas = 0, tensor_parallel = 0;  // 0: as the layout says
};

bool block_fp8(const PlanOpts& o) {
  return o.wire_dtype == "float8_e4m3fn";
}

// What one replica receives per round: the sum over its tensor-parallel ranks.
uint64_t replica_bytes(const m2n::Plan& plan, const m2n::PlanStats& stats) {
  uint64_t bytes = 0;
  for (int t = 0; t < plan.inference.tensor_parallel; ++t)
    bytes += stats.worker_bytes[static_cast<std::size_t>(t)];
  return bytes;
}

struct ModelSize {
  std::size_t tensors = 0;
  double params = 0;
  uint64_t held_bytes = 0;  // one copy of the model as the trainer holds it
  m2n::Fp8Selection fp8;    // --wire-dtype float8_e4m3fn: the weights sent so
  // The engine's own parameters per TP rank, where the layout composes them ("engine").
  std::size_t engine_tensors = 0, engine_composed = 0;
};

ModelSize model_size(const m2n::Layout& layout) {
  ModelSize m;
  for (const auto& g : layout.groups) {
    double numel = 1;
    uint64_t bytes = element_size(g.dtype);
    for (int64_t d : g.shape) {
      numel *= static_cast<double>(d);
      bytes *= static_cast<uint64_t>(d);
    }
    m.tensors += g.names.size();
    m.params += numel * static_cast<double>(g.names.size());
    m.held_bytes += bytes * g.names.size();
  }
  return m;
}

// What trainer rank 0 holds already, by the layout's holdings: the part of the model it need not
// gather before it broadcasts.
uint64_t rank0_held_bytes(const m2n::Layout& layout, uint64_t model_bytes) {
  uint64_t rank0_held = 0;
  for (const auto& g : layout.groups) {
    uint64_t row = element_size(g.dtype);  // bytes per unit of the held dimension, or of it all
    for (int64_t d : g.shape) row *= static_cast<uint64_t>(d);
    for (const auto& h : *g.holdings)
      if (h.rank == 0)
        rank0_held +=
            g.names.size() *
            (h.dim < 0 ? row
                       : row / static_cast<uint64_t>(g.shape[static_cast<std::size_t>(h.dim)]) *
                             static_cast<uint64_t>(h.hi - h.lo));
  }
  return std::min(rank0_held, model_bytes);
}

// The round's time on the given links: the m2n plan's, next to rank 0 gathering and broadcasting.
struct PlanCosts {
  Extremes t, w;  // bytes per trainer rank, per worker rank
  double trainer_s = 0, worker_s = 0, m2n_s = 0, bcast_s = 0, gather_s = 0;
};

PlanCosts plan_costs(const PlanOpts& o, const m2n::Layout& layout, const m2n::PlanStats& stats) {
  PlanCosts c;
  c.t = extremes(stats.trainer_bytes);
  c.w = extremes(stats.worker_bytes);
  const double trainer_bw = o.trainer_gbs * 1e9, worker_bw = o.worker_gbs * 1e9;
  c.trainer_s = static_cast<double>(c.t.max) / trainer_bw;
  c.worker_s = static_cast<double>(c.w.max) / worker_bw;
  c.m2n_s = std::max(c.trainer_s, c.worker_s);
  // Rank 0 broadcasting (the nccl backend): every byte of the model leaves rank 0's link once
  // (a pipelined ring or tree) and every worker link takes the whole model; before that, rank 0
  // gathers what it does not hold, over its own link.
  c.bcast_s = static_cast<double>(stats.model_bytes) / std::min(trainer_bw, worker_bw);
  const uint64_t rank0_held = rank0_held_bytes(layout, stats.model_bytes);
  c.gather_s = static_cast<double>(stats.model_bytes - rank0_held) / trainer_bw;
  return c;
}

void write_plan_file(const m2n::Plan& plan, const std::string& path) {
  std::ofstream f(path, std::ios::trunc);
  f << m2n::plan_to_json(plan).dump() << '\n';
  f.close();  // a full disk shows here, not in a destructor
  if (!f) throw Error(WT_ERR_SYSTEM, fmt::format("cannot write the plan to {}", path));
}

void print_plan_json(const PlanOpts& o, const m2n::Plan& plan, const m2n::PlanStats& stats,
                     const ModelSize& size, const PlanCosts& c, const std::string& digest,
                     double took) {
  nlohmann::json j = {{"parameters", size.params},
                      {"tensors", size.tensors},
                      {"groups", plan.groups.size()},
                      {"model_bytes", stats.model_bytes},
                      {"trainer_ranks", plan.trainer_ranks},
                      {"worker_ranks", plan.inference.worker_ranks()},
                      {"sends_per_round", stats.pieces},
                      {"trainer_bytes_max", c.t.max},
                      {"trainer_bytes_min", c.t.min},
                      {"worker_bytes_max", c.w.max},
                      {"worker_bytes_min", c.w.min},
                      {"makespan_s", c.m2n_s},
                      {"rank0_broadcast_s", c.bcast_s},
                      {"rank0_gather_s", c.gather_s},
                      {"digest", digest},
                      {"wire_dtype", o.wire_dtype},
                      {"replica_bytes", replica_bytes(plan, stats)},
                      {"held_model_bytes", size.held_bytes},
                      {"plan_seconds", took}};
  if (block_fp8(o)) {
    j["fp8_weights"] = size.fp8.weights;
    j["fp8_kept_for_tp"] = size.fp8.kept_tp;
  }
  if (size.engine_tensors > 0) {
    j["engine_tensors"] = size.engine_tensors;
    j["engine_composed"] = size.engine_composed;
  }
  fmt::print("{}\n", j.dump());
}

void print_plan_text(const PlanOpts& o, const m2n::Plan& plan, const m2n::PlanStats& stats,
                     const ModelSize& size, const PlanCosts& c, const std::string& digest,
                     double took) {
  const Extremes& t = c.t;
  const Extremes& w = c.w;
  fmt::print("layout: {:.4g} G parameters in {} tensors ({} groups), {:.2f} GB\n",
             size.params / 1e9, size.tensors, plan.groups.size(), gb(size.held_bytes));
  fmt::print("ranks: {} trainer -> {} worker ({} replicas x tensor-parallel {})\n",
             plan.trainer_ranks, plan.inference.worker_ranks(), plan.inference.replicas,
             plan.inference.tensor_parallel);
  fmt::print("plan: {} point-to-point sends per round, computed in {:.2f} s, digest {}\n",
             stats.pieces, took, digest);
  if (size.engine_tensors > 0)
    fmt::print(
        "engine layout: {} parameters per TP rank, {} of them composed (fused, stacked or "
        "tied); each part's slice lies back to back in its engine parameter\n",
        size.engine_tensors, size.engine_composed);
  if (block_fp8(o)) {
    fmt::print(
        "on the wire: block FP8 for {} weights (float8_e4m3fn, 128 x 128 blocks, fp32 scales "
        "<name>_scale_inv), the rest as held\n",
        size.fp8.weights);
    if (size.fp8.kept_tp > 0)
      fmt::print(
          "kept as held: {} weight(s) whose tensor-parallel slices would cut blocks (first: "
          "'{}')\n",
          size.fp8.kept_tp, size.fp8.first_kept_tp);
  }
  fmt::print(
      "received per replica:      {:10.3f} GB ({:.3f} x the model as held)\n",
      gb(replica_bytes(plan, stats)),
      static_cast<double>(replica_bytes(plan, stats)) / static_cast<double>(size.held_bytes));
  fmt::print("sent per trainer rank:     {:10.3f} GB max (rank {}), {:10.3f} GB min\n", gb(t.max),
             t.busiest, gb(t.min));
  fmt::print("received per worker rank:  {:10.3f} GB max (rank {}), {:10.3f} GB min\n", gb(w.max),
             w.busiest, gb(w.min));
  fmt::print("busiest link: {} ({:.3f} s at {} GB/s)\n",
             c.trainer_s >= c.worker_s ? fmt::format("trainer rank {}", t.busiest)
                                       : fmt::format("worker rank {}", w.busiest),
             c.m2n_s, c.trainer_s >= c.worker_s ? o.trainer_gbs : o.worker_gbs);
  fmt::print("m2n makespan:           {:9.3f} s\n", c.m2n_s);
  fmt::print("rank-0 broadcast:       {:9.3f} s (x{:.1f}), plus {:.3f} s to gather at rank 0\n",
             c.bcast_s, c.bcast_s / c.m2n_s, c.gather_s);
  fmt::print(
      "busiest trainer rank sends {:.4f} model copies per round; rank 0 broadcasting "
      "sends at least 1 (replicas / trainer ranks = {:.4f})\n",
      static_cast<double>(t.max) / static_cast<double>(stats.model_bytes),
      static_cast<double>(plan.inference.replicas) / plan.trainer_ranks);
  if (o.anchor_s > 0)
    fmt::print("anchor: {:.3f} s (makespan / anchor = {:.2f})\n", o.anchor_s, c.m2n_s / o.anchor_s);
}

}  // namespace

Run add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan", "Compute the m2n plan of a layout file and its cost next to rank-0 broadcast");
  auto o = std::make_shared<PlanOpts>();
  cmd->add_option("layout", o->layout, "Layout file (YAML or JSON; see docs/m2n.md)")->required();
  cmd->add_option("--trainer-gbs", o->trainer_gbs, "Link bandwidth per trainer rank, GB/s")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e6));
  cmd->add_option("--worker-gbs", o->worker_gbs, "Link bandwidth per worker rank, GB/s")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e6));
  cmd->add_option("--anchor-s", o->anchor_s,
                  "A published round time to print next to the makespan (seconds)");
  cmd->add_option("--write-plan", o->write_plan, "Write the plan's JSON (the workers' form) here");
  cmd->add_flag("--json", o->json, "Print the figures as JSON");
  cmd->add_option("--wire-dtype", o->wire_dtype,
                  "as-held, or float8_e4m3fn: block FP8 for the weights an FP8 engine stores so")
      ->capture_default_str()
      ->check(CLI::IsMember({"as-held", "float8_e4m3fn"}));
  cmd->add_option("--replicas", o->replicas, "Inference replicas, instead of the layout's")
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--tensor-parallel", o->tensor_parallel,
                  "Tensor-parallel ranks per replica (the replica width), instead of the layout's")
      ->check(CLI::Range(1, 1024));
  return [o]() {
    const auto started = std::chrono::steady_clock::now();
    // Layouts state repeated parameters as ranges, so even a 1 T model's file is small.
    nlohmann::json doc = yaml_to_json(load_yaml_file(o->layout), o->layout);
    // Another inference shape: in the layout, so that it is checked (and bounded) as the file is.
    if (doc.is_object() && doc.contains("inference") && doc["inference"].is_object()) {
      if (o->replicas > 0) doc["inference"]["replicas"] = o->replicas;
      if (o->tensor_parallel > 0) doc["inference"]["tensor_parallel"] = o->tensor_parallel;
    }
    const m2n::Layout layout = m2n::layout_from_json(doc, "layout " + o->layout);
    ModelSize size = model_size(layout);
    // Block FP8: the plan of what goes on the wire, weights and scales (block_fp8_layout.hpp).
    const m2n::Layout wire =
        block_fp8(*o) ? m2n::block_fp8_layout(layout, "layout " + o->layout, &size.fp8) : layout;
    const m2n::Plan plan = m2n::compute_plan(wire);
    const m2n::PlanStats stats = m2n::plan_stats(plan);
    if (!wire.engine.empty()) {  // checked as an m2n init checks it
      const auto engine =
          m2n::compose_engine(plan, wire.engine, "layout " + o->layout + ", engine");
      size.engine_tensors = engine.tensors.size();
      size.engine_composed = engine.composed;
    }
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const PlanCosts costs = plan_costs(*o, wire, stats);
    const std::string digest = m2n::plan_digest(plan);
    if (!o->write_plan.empty()) write_plan_file(plan, o->write_plan);
    if (o->json) {
      print_plan_json(*o, plan, stats, size, costs, digest, took);
      return 0;
    }
    print_plan_text(*o, plan, stats, size, costs, digest, took);
    return 0;
  };
}

}  // namespace wt::cli
