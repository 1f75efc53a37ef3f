// Block FP8 in the plan: each FP8 weight becomes its float8_e4m3fn values and its fp32 block
// scales, both planned like any parameter; a block two ranks' shards cut has both as holders of
// its scale; a weight whose TP slices would cut blocks stays as held; fused parts that would
// straddle a block are refused; and on the 1 T layout the bytes halve at both replica widths.
#include "block_fp8_layout.hpp"
#include "engine_layout.hpp"
#include "m2n_plan.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/errors.hpp>
#include <wt/services/yaml_json.hpp>
#include "support/invalid_argument.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

namespace wt::m2n {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

const DLDataType kFp8{kDLFloat8E4m3fnCode, 8, 1};
const DLDataType kF32{kDLFloat, 32, 1};

std::string error_of(const std::function<void()>& f) {
  return test::invalid_argument_of(f);
}

// Two FSDP ranks holding rows: 448 rows of a 896-row weight each (block row 3 cut between them).
json layout_json(int tp = 1, json engine = json()) {
  json l = {
      {"parameters",
       {{{"name", "layers.{}.q_proj.weight"},
         {"ranges", {{0, 2}}},
         {"dtype", "bfloat16"},
         {"shape", {896, 256}}},
        {{"name", "layers.{}.k_proj.weight"},
         {"ranges", {{0, 2}}},
         {"dtype", "bfloat16"},
         {"shape", {256, 256}}},
        {{"name", "layers.{}.v_proj.weight"},
         {"ranges", {{0, 2}}},
         {"dtype", "bfloat16"},
         {"shape", {192, 256}}},
        {{"name", "layers.{}.o_proj.weight"},
         {"ranges", {{0, 2}}},
         {"dtype", "bfloat16"},
         {"shape", {256, 896}}},
        {{"name", "layers.{}.norm.weight"},
         {"ranges", {{0, 2}}},
         {"dtype", "bfloat16"},
         {"shape", {256}}},
        {{"name", "embed.weight"}, {"dtype", "bfloat16"}, {"shape", {64, 256}}}}},
      {"trainer", {{"ranks", 2}, {"holdings", {{{"match", "*"}, {"shard_dim", 0}}}}}},
      {"inference",
       {{"replicas", 1},
        {"tensor_parallel", tp},
        {"rules",
         {{{"match", "*.o_proj.weight"}, {"dim", 1}}, {{"match", "*_proj.weight"}, {"dim", 0}}}}}}};
  if (!engine.is_null()) l["engine"] = engine;
  return l;
}

const ParamGroup* group_of(const Layout& l, const std::string& name) {
  for (const ParamGroup& g : l.groups)
    if (std::find(g.names.begin(), g.names.end(), name) != g.names.end()) return &g;
  return nullptr;
}

TEST(BlockFp8Layout, WeightsBecomeFp8ValuesAndBlockScalesHeldByEveryRankThatHoldsPartOfABlock) {
  Fp8Selection sel;
  const Layout l = block_fp8_layout(layout_from_json(layout_json(), "layout"), "layout", &sel);
  EXPECT_EQ(sel.weights, 8u);  // q, k, v, o of two layers; norms and the embedding stay
  EXPECT_EQ(sel.kept_tp, 0u);
  const ParamGroup* q = group_of(l, "layers.1.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(q->dtype == kFp8);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{896, 256}));
  const ParamGroup* s = group_of(l, "layers.1.q_proj.weight_scale_inv");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->dtype == kF32);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{7, 2}));
  // Rank 0 holds rows 0..448 (block rows 0..3, the fourth cut), rank 1 rows 448..896 (3..7).
  ASSERT_EQ(s->holdings->size(), 2u);
  EXPECT_EQ((*s->holdings)[0].lo, 0);
  EXPECT_EQ((*s->holdings)[0].hi, 4);
  EXPECT_EQ((*s->holdings)[1].lo, 3);
  EXPECT_EQ((*s->holdings)[1].hi, 7);
  EXPECT_TRUE(group_of(l, "layers.0.norm.weight")->dtype == (DLDataType{kDLBfloat, 16, 1}));
  EXPECT_TRUE(group_of(l, "embed.weight")->dtype == (DLDataType{kDLBfloat, 16, 1}));
  // The plan covers every value and scale once; the cut block's scale has both ranks as holders.
  const Plan plan = compute_plan(l);
  for (const GroupPlan& g : plan.groups) {
    if (std::find(g.names.begin(), g.names.end(), "layers.1.q_proj.weight_scale_inv") ==
        g.names.end())
      continue;
    bool cut_block_shared = false;
    for (const Piece& p : g.pieces)
      if (p.box.lo[0] <= 3 && 3 < p.box.hi[0]) cut_block_shared = p.holders == std::vector{0, 1};
    EXPECT_TRUE(cut_block_shared);
  }
  // Half the bytes, and a bit: 1 byte a value plus 4 per 128 x 128 block.
  const uint64_t held = plan_stats(compute_plan(layout_from_json(layout_json(), "l"))).model_bytes;
  const uint64_t wire = plan_stats(plan).model_bytes;
  const uint64_t fp8_values = 2 * (896 * 256 + 256 * 256 + 192 * 256 + 256 * 896);
  const uint64_t scales = 4 * 2 * (7 * 2 + 2 * 2 + 2 * 2 + 2 * 7);
  EXPECT_EQ(held - wire, fp8_values * 2 - fp8_values - scales);
}

TEST(BlockFp8Layout, AWeightWhoseTensorParallelSlicesCutBlocksIsKeptAsHeld) {
  // TP 4: q's slices are 224 rows, k's 64, v's 48, o's 224 columns: all cut blocks, all kept.
  Fp8Selection sel;
  Layout l = block_fp8_layout(layout_from_json(layout_json(4), "layout"), "layout", &sel);
  EXPECT_EQ(sel.weights, 0u);
  EXPECT_EQ(sel.kept_tp, 8u);
  EXPECT_EQ(sel.first_kept_tp, "layers.0.q_proj.weight");
  // TP 2: q 448 rows (cut), k 128 rows (whole), v 96 (cut), o 448 columns (cut).
  sel = {};
  l = block_fp8_layout(layout_from_json(layout_json(2), "layout"), "layout", &sel);
  EXPECT_EQ(sel.weights, 2u);
  EXPECT_EQ(sel.kept_tp, 6u);
  EXPECT_TRUE(group_of(l, "layers.0.k_proj.weight")->dtype == kFp8);
  EXPECT_TRUE(group_of(l, "layers.0.q_proj.weight")->dtype == (DLDataType{kDLBfloat, 16, 1}));
  // A TP-2 worker rank is sent its slice of k's scales: [1, 2].
  const auto planned = planned_params(compute_plan(l), 1);
  const auto it = std::find_if(planned.begin(), planned.end(), [](const WorkerParam& p) {
    return p.name == "layers.0.k_proj.weight_scale_inv";
  });
  ASSERT_NE(it, planned.end());
  EXPECT_EQ(it->local_shape, (std::vector<int64_t>{1, 2}));
}

TEST(BlockFp8Layout, AScaleNameThatIsAParameterAlreadyIsRefused) {
  json j = layout_json();
  j["parameters"].push_back(
      {{"name", "layers.0.k_proj.weight_scale_inv"}, {"dtype", "float32"}, {"shape", {2, 2}}});
  EXPECT_THAT(error_of([&] { block_fp8_layout(layout_from_json(j, "layout"), "layout"); }),
              HasSubstr("invalid layout: parameter 'layers.0.k_proj.weight' is sent as block "
                        "FP8, and its scales would be 'layers.0.k_proj.weight_scale_inv', which "
                        "is a parameter already"));
}

TEST(BlockFp8Layout, FusedFp8PartsComposeTheirScalesTooAndAPartThatWouldStraddleABlockIsRefused) {
  const json fuse_kq = json::parse(
      R"([{"fuse": "*.kq_proj.weight", "parts": ["*.k_proj.weight", "*.q_proj.weight"]}])");
  Layout l = block_fp8_layout(layout_from_json(layout_json(1, fuse_kq), "layout"), "layout");
  const EngineLayout e = compose_engine(compute_plan(l), l.engine, "engine");
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& t : e.tensors) shapes[t.name] = t.local_shape;
  EXPECT_EQ(shapes["layers.0.kq_proj.weight"], (std::vector<int64_t>{256 + 896, 256}));
  EXPECT_EQ(shapes["layers.0.kq_proj.weight_scale_inv"], (std::vector<int64_t>{2 + 7, 2}));
  EXPECT_EQ(e.place_of("layers.0.q_proj.weight_scale_inv").element_offset, 2u * 2);
  // v first: its 192 rows end inside a block, which k would share. Last, it may.
  const json fuse_vk = json::parse(
      R"([{"fuse": "*.vk_proj.weight", "parts": ["*.v_proj.weight", "*.k_proj.weight"]}])");
  l = block_fp8_layout(layout_from_json(layout_json(1, fuse_vk), "layout"), "layout");
  EXPECT_THAT(error_of([&] { compose_engine(compute_plan(l), l.engine, "engine"); }),
              HasSubstr("invalid engine[0]: 'layers.0.v_proj.weight' has 192 rows per TP rank, "
                        "not whole 128-row blocks: sent as block FP8 and fused into "
                        "'layers.0.vk_proj.weight' before another part"));
  const json fuse_kv = json::parse(
      R"([{"fuse": "*.kv_proj.weight", "parts": ["*.k_proj.weight", "*.v_proj.weight"]}])");
  l = block_fp8_layout(layout_from_json(layout_json(1, fuse_kv), "layout"), "layout");
  // Per layer kv and its scales, q and o and theirs, the norm; and the embedding.
  EXPECT_EQ(compose_engine(compute_plan(l), l.engine, "engine").tensors.size(), 2u * 7 + 1);
}

TEST(BlockFp8Layout, TheOneTrillionLayoutsBytesHalveAtBothReplicaWidths) {
  const std::string path = std::string(WT_SOURCE_DIR) + "/configs/layouts/kimi-k2-1t-engine.json";
  Layout layout = layout_from_json(yaml_to_json(load_yaml_file(path), path), path);
  const auto replica = [](const Plan& plan, const PlanStats& s) {
    uint64_t b = 0;
    for (int t = 0; t < plan.inference.tensor_parallel; ++t)
      b += s.worker_bytes[static_cast<std::size_t>(t)];
    return static_cast<double>(b);
  };
  const auto makespan = [](const PlanStats& s) {
    return static_cast<double>(
               std::max(*std::max_element(s.trainer_bytes.begin(), s.trainer_bytes.end()),
                        *std::max_element(s.worker_bytes.begin(), s.worker_bytes.end()))) /
           50e9;
  };
  for (auto [replicas, tp, goal_s] : {std::tuple{16, 8, 2.6}, std::tuple{8, 16, 1.3}}) {
    layout.inference.replicas = replicas;
    layout.inference.tensor_parallel = tp;
    const Plan held_plan = compute_plan(layout);
    Fp8Selection sel;
    const Layout wire = block_fp8_layout(layout, path, &sel);
    const Plan fp8_plan = compute_plan(wire);
    EXPECT_EQ(sel.kept_tp, 0u);
    // Every engine tensor of the fused, stacked model has its scales, composed alike.
    const EngineLayout e = compose_engine(fp8_plan, wire.engine, path);
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& t : e.tensors) shapes[t.name] = t.local_shape;
    EXPECT_EQ(shapes["model.layers.9.mlp.experts.w13_weight_scale_inv"],
              (std::vector<int64_t>{384, 2 * 2048 / tp / 128, 7168 / 128}));
    const PlanStats held = plan_stats(held_plan), fp8 = plan_stats(fp8_plan);
    EXPECT_LE(replica(fp8_plan, fp8), 0.51 * replica(held_plan, held))
        << replicas << " x TP " << tp;
    EXPECT_LE(makespan(fp8), 0.51 * makespan(held)) << replicas << " x TP " << tp;
    std::printf(
        "%d x TP %d: %.0f GB per replica as held, %.0f GB in block FP8 (%.3fx, goal "
        "<= 0.51x); makespan %.3f s -> %.3f s (anchor %.1f s: %.3fx); %zu FP8 weights\n",
        replicas, tp, replica(held_plan, held) / 1e9, replica(fp8_plan, fp8) / 1e9,
        replica(fp8_plan, fp8) / replica(held_plan, held), makespan(held), makespan(fp8), goal_s,
        makespan(fp8) / goal_s, sel.weights);
  }
}

}  // namespace
}  // namespace wt::m2n
