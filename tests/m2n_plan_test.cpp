// The m2n plan: every element each worker rank needs comes from exactly one trainer rank that
// holds it, the bytes are balanced, the same layout gives the same plan, and every layout or plan
// that cannot work is refused at once, naming the parameter.
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

json small_layout(json inference_rules = json::array({{{"match", "w*"}, {"dim", 1}}}),
                  int trainers = 3, int replicas = 2, int tp = 2) {
  return {
      {"parameters",
       {{{"name", "w{}"}, {"ranges", {{0, 3}}}, {"dtype", "float32"}, {"shape", {6, 4}}},
        {{"name", "b"}, {"dtype", "bfloat16"}, {"shape", {5}}},
        {{"name", "v{}"}, {"ranges", {{0, 7}}}, {"dtype", "float32"}, {"shape", {4, 2}}}}},
      {"trainer",
       {{"ranks", trainers},
        {"holdings",
         {{{"match", "w*"}, {"shard_dim", 0}}, {{"match", "*"}, {"replicated", true}}}}}},
      {"inference", {{"replicas", replicas}, {"tensor_parallel", tp}, {"rules", inference_rules}}}};
}

std::string error_of(const std::function<void()>& f) {
  return test::invalid_argument_of(f);
}

// Whether trainer rank `rank` holds all of `box` of a parameter with these holdings.
bool holds(const std::vector<Held>& holdings, int rank, const Box& box) {
  for (const Held& h : holdings)
    if (h.rank == rank && (h.dim < 0 || (h.lo <= box.lo[static_cast<std::size_t>(h.dim)] &&
                                         box.hi[static_cast<std::size_t>(h.dim)] <= h.hi)))
      return true;
  return false;
}

// Enumerates every element of every worker rank's need and counts how often a piece delivers it;
// checks each sender holds what it sends.
void expect_exact_cover(const Layout& layout, const Plan& plan) {
  const int tp = plan.inference.tensor_parallel;
  ASSERT_EQ(plan.groups.size(), layout.groups.size());
  for (std::size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const GroupPlan& g = plan.groups[gi];
    ASSERT_EQ(g.shape.size(), 2u) << "the test layouts are 2-D or padded to it";
    for (std::size_t m = 0; m < g.names.size(); ++m)
      for (int r = 0; r < plan.inference.replicas; ++r)
        for (int t = 0; t < tp; ++t) {
          const Box need = needed_box(g.shape, g.tp_dim, tp, t);
          std::map<std::pair<int64_t, int64_t>, int> hits;
          for (const Piece& p : g.pieces) {
            if (p.tp_rank != t) continue;
            const int sender = Plan::sender(p, m, plan.inference.replicas, r);
            EXPECT_TRUE(holds(*layout.groups[gi].holdings, sender, p.box))
                << g.names[m] << " sent by rank " << sender << ", which does not hold it";
            for (int64_t i = p.box.lo[0]; i < p.box.hi[0]; ++i)
              for (int64_t j = p.box.lo[1]; j < p.box.hi[1]; ++j) ++hits[{i, j}];
          }
          for (int64_t i = need.lo[0]; i < need.hi[0]; ++i)
            for (int64_t j = need.lo[1]; j < need.hi[1]; ++j)
              EXPECT_EQ((hits[{i, j}]), 1) << g.names[m] << " [" << i << "," << j << "] tp " << t;
          EXPECT_EQ(hits.size(),
                    static_cast<std::size_t>((need.hi[0] - need.lo[0]) * (need.hi[1] - need.lo[1])))
              << "a piece sends elements the worker does not need";
        }
  }
}

TEST(M2nPlan, EveryElementEachWorkerNeedsComesExactlyOnceFromARankThatHoldsIt) {
  // Dim-0 shards to dim-1 TP slices (tiles), replicated to whole and to dim-0 slices, a ragged
  // shard (6 rows over 4 ranks: 2, 2, 2, 0), 1 and 2 replicas.
  for (int trainers : {1, 2, 3, 4})
    for (int replicas : {1, 2})
      for (int dim : {-1, 0, 1}) {
        SCOPED_TRACE(testing::Message()
                     << trainers << " trainers, " << replicas << " replicas, tp dim " << dim);
        json l = small_layout(
            json::array({{{"match", "w*"}, {"dim", dim}}, {{"match", "v*"}, {"dim", 0}}}), trainers,
            replicas, 2);
        l["parameters"][1]["shape"] = {5, 1};  // 2-D, for the enumeration
        const Layout layout = layout_from_json(l, "test layout");
        const Plan plan = compute_plan(layout);
        expect_exact_cover(layout, plan);
        // The workers' form says the same and passes the coverage check.
        EXPECT_EQ(plan_to_json(plan_from_json(plan_to_json(plan), "plan")), plan_to_json(plan));
      }
}

TEST(M2nPlan, MixedAndOverlappingHoldingsAreCoveredByRanksThatHoldEachPiece) {
  // Rank 0 holds w whole; rank 1 two overlapping slices [0,4) and [2,4) that end together; rank 2
  // the rows [4,6) twice over. Every row has holders, and nobody is named for rows it lacks.
  Layout layout = layout_from_json(
      small_layout(json::array({{{"match", "w*"}, {"dim", 1}}, {{"match", "v*"}, {"dim", 0}}}), 3,
                   2, 2),
      "layout");
  layout.groups[0].holdings = std::make_shared<std::vector<Held>>(
      std::vector<Held>{{0, -1, 0, 0}, {1, 0, 0, 4}, {1, 0, 2, 4}, {2, 0, 4, 6}, {2, 0, 4, 6}});
  layout.groups[1].shape = {5, 1};  // 2-D, for the enumeration
  const Plan plan = compute_plan(layout);
  expect_exact_cover(layout, plan);
  for (const Piece& p : plan.groups[0].pieces)
    EXPECT_EQ(p.holders, (p.box.lo[0] >= 4 ? std::vector<int>{0, 2} : std::vector<int>{0, 1}));
}

TEST(M2nPlan, ReplicatedWeightsAreSpreadSoNoTrainerSendsMoreThanOnePieceAboveAnother) {
  json l = {{"parameters",
             {{{"name", "p{}"}, {"ranges", {{0, 11}}}, {"dtype", "float32"}, {"shape", {64, 64}}}}},
            {"trainer", {{"ranks", 4}, {"holdings", {{{"match", "*"}, {"replicated", true}}}}}},
            {"inference",
             {{"replicas", 3}, {"tensor_parallel", 2}, {"rules", {{{"match", "*"}, {"dim", 0}}}}}}};
  const Plan plan = compute_plan(layout_from_json(l, "layout"));
  const PlanStats s = plan_stats(plan);
  const uint64_t piece = 32 * 64 * 4;
  const auto [lo, hi] = std::minmax_element(s.trainer_bytes.begin(), s.trainer_bytes.end());
  EXPECT_LE(*hi - *lo, piece);
  uint64_t sent = 0;
  for (uint64_t b : s.trainer_bytes) sent += b;
  EXPECT_EQ(sent, 11u * 3 * 64 * 64 * 4);  // every replica gets the model once
  for (uint64_t b : s.worker_bytes) EXPECT_EQ(b, 11u * piece);
  EXPECT_EQ(s.pieces, 11u * 3 * 2);
}

TEST(M2nPlan, ShardedWeightsAreSentByTheirHoldersEvenly) {
  json l = small_layout(json::array({{{"match", "*"}, {"dim", 1}}}), 3, 2, 2);
  l["parameters"] = {
      {{"name", "w{}"}, {"ranges", {{0, 5}}}, {"dtype", "float32"}, {"shape", {6, 4}}}};
  const PlanStats s = plan_stats(compute_plan(layout_from_json(l, "layout")));
  for (uint64_t b : s.trainer_bytes) EXPECT_EQ(b, 5u * 2 * 2 * 4 * 4);  // 2 rows, 2 replicas
  EXPECT_EQ(s.model_bytes, 5u * 6 * 4 * 4);
}

TEST(M2nPlan, TheSameLayoutGivesTheSamePlanByteForByte) {
  const json l = small_layout();
  const Plan a = compute_plan(layout_from_json(l, "a")), b = compute_plan(layout_from_json(l, "b"));
  EXPECT_EQ(plan_to_json(a).dump(), plan_to_json(b).dump());
  EXPECT_EQ(plan_digest(a), plan_digest(b));
  EXPECT_EQ(plan_digest(a).size(), 16u);
  json other = l;
  other["inference"]["replicas"] = 3;
  EXPECT_NE(plan_digest(compute_plan(layout_from_json(other, "c"))), plan_digest(a));
}

TEST(M2nPlan, ALayoutThatCannotBePlannedIsRefusedNamingTheParameter) {
  // Tensor parallelism that does not divide the dimension it splits.
  json l = small_layout(json::array({{{"match", "w*"}, {"dim", 1}}}), 3, 1, 3);
  EXPECT_THAT(error_of([&] { compute_plan(layout_from_json(l, "layout")); }),
              HasSubstr("parameter 'w0' (and 2 more like it): dim 1 of size 4 does not divide by "
                        "tensor_parallel 3"));
  // Rows no trainer rank holds.
  Layout gap = layout_from_json(small_layout(), "layout");
  gap.groups[0].holdings =
      std::make_shared<std::vector<Held>>(std::vector<Held>{{0, 0, 0, 2}, {1, 0, 2, 4}});
  EXPECT_THAT(error_of([&] { compute_plan(gap); }),
              HasSubstr("no trainer rank holds elements 4..6 of dim 0 of parameter 'w0'"));
  // Holdings that slice one parameter along two dimensions.
  Layout two = gap;
  two.groups[0].holdings =
      std::make_shared<std::vector<Held>>(std::vector<Held>{{0, 0, 0, 6}, {1, 1, 0, 4}});
  EXPECT_THAT(error_of([&] { compute_plan(two); }), HasSubstr("sliced along dims 0 and 1"));
  // A holding outside the parameter.
  Layout outside = gap;
  outside.groups[0].holdings = std::make_shared<std::vector<Held>>(std::vector<Held>{{0, 0, 0, 7}});
  EXPECT_THAT(error_of([&] { compute_plan(outside); }),
              HasSubstr("trainer rank 0 claims a holding of parameter 'w0'"));
  // Nobody holds it at all.
  Layout none = layout_from_json(small_layout(), "layout");
  none.groups[1].holdings = std::make_shared<std::vector<Held>>();
  EXPECT_THAT(error_of([&] { compute_plan(none); }),
              HasSubstr("no trainer rank holds parameter 'b'"));
}

TEST(M2nPlan, ABadLayoutFileIsRefusedNamingTheEntry) {
  json l = small_layout();
  l["trainer"]["holdings"] = {{{"match", "w*"}, {"shard_dim", 0}}};
  EXPECT_THAT(error_of([&] { layout_from_json(l, "layout x.yaml"); }),
              HasSubstr("invalid layout x.yaml, trainer: no holdings rule matches parameter 'b'"));
  l = small_layout();
  l["parameters"][0]["ranges"] = {{3, 1}};
  EXPECT_THAT(error_of([&] { layout_from_json(l, "layout"); }),
              HasSubstr("invalid layout, parameters[0]: each range must be"));
  l = small_layout();
  l["parameters"][0]["ranges"] = {{0, 2}, {0, 2}};
  EXPECT_THAT(error_of([&] { layout_from_json(l, "layout"); }),
              HasSubstr("the name has 1 '{}' but 2 ranges are given"));
  l = small_layout();
  l["parameters"][1]["shape"] = {5, 0};
  EXPECT_THAT(error_of([&] { layout_from_json(l, "layout"); }),
              HasSubstr("parameters[1]: every dimension of 'shape' must be an integer in 1..2^40"));
  l = small_layout();
  l["parameters"][1]["dtype"] = "float33";
  EXPECT_THAT(error_of([&] { layout_from_json(l, "layout"); }),
              HasSubstr("dtype 'float33' is not a dtype wt knows"));
  l = small_layout();
  l["trainer"]["holdings"][0] = {{"match", "w*"}, {"shard_dim", 2}};
  EXPECT_THAT(error_of([&] { layout_from_json(l, "layout"); }),
              HasSubstr("shard_dim 2 is past the 2 dims of 'w0'"));
  l = small_layout();
  l["inference"]["replicas"] = 0;
  EXPECT_THAT(error_of([&] { layout_from_json(l, "layout"); }),
              HasSubstr("inference: field 'replicas' must be in 1..65536, got 0"));
  l = small_layout();
  l["trainer"]["rankz"] = 3;
  EXPECT_THAT(error_of([&] { layout_from_json(l, "layout"); }),
              HasSubstr("trainer: unknown field 'rankz' (known fields: ranks, holdings)"));
  l = small_layout();
  l["parameters"].push_back({{"name", "b"}, {"dtype", "float32"}, {"shape", {2}}});
  EXPECT_THAT(error_of([&] { layout_from_json(l, "layout"); }),
              HasSubstr("parameters[3]: parameter 'b' is listed twice"));
  // Ranges that would expand to more parameters than any model has.
  l = small_layout();
  l["parameters"][0]["name"] = "w{}.{}";
  l["parameters"][0]["ranges"] = {{0, 1 << 20}, {0, 1 << 20}};
  EXPECT_THAT(error_of([&] { layout_from_json(l, "layout"); }), HasSubstr("more than"));
  // Sizes whose round would not count in 64 bits.
  l = small_layout();
  l["parameters"][0]["shape"] = {int64_t{1} << 25, int64_t{1} << 25};
  l["inference"]["replicas"] = 4096;
  EXPECT_THAT(error_of([&] { layout_from_json(l, "layout"); }),
              HasSubstr("the model times the worker ranks is more than 2^62 bytes"));
}

// Layouts of a few hundred bytes that used to take gigabytes or minutes are refused at a bound,
// naming it: every layout is answered in bounded memory and time (wt plan, an m2n init).
TEST(M2nPlan, HostileLayoutsAreRefusedAtABoundNamingIt) {
  // A million long names (64 MiB and more).
  json l = small_layout();
  l["parameters"][0]["name"] = std::string(500, 'n') + "{}";
  l["parameters"][0]["ranges"] = {{0, 1 << 20}};
  EXPECT_THAT(error_of([&] { layout_from_json(l, "layout"); }),
              HasSubstr("names would take more than 64 MiB"));
  // Rules that match slowly, against long names: the glob steps are counted and bounded.
  l = small_layout();
  l["parameters"][0]["name"] = std::string(400, 'a') + "{}";
  l["parameters"][0]["ranges"] = {{0, 2000}};
  json rules = json::array();
  std::string slow;
  for (int i = 0; i < 30; ++i) slow += "*a";
  for (int i = 0; i < 1000; ++i) rules.push_back({{"match", slow + "b"}, {"replicated", true}});
  rules.push_back({{"match", "*"}, {"replicated", true}});
  l["trainer"]["holdings"] = rules;
  EXPECT_THAT(
      error_of([&] { layout_from_json(l, "layout"); }),
      HasSubstr("against the holdings and inference rules takes more than 268435456 steps"));
  // Many distinct shapes over 65,536 trainer ranks: what they hold is bounded.
  l = small_layout();
  l["trainer"]["ranks"] = 65536;
  for (int i = 0; i < 200; ++i)
    l["parameters"].push_back(
        {{"name", "s" + std::to_string(i)}, {"dtype", "float32"}, {"shape", {i + 1}}});
  EXPECT_THAT(error_of([&] { layout_from_json(l, "layout"); }),
              HasSubstr("trainer ranks hold of its parameters' "));
  // Few pieces, but FSDP shards over 65,536 ranks read by each of 1,024 tensor-parallel ranks:
  // the planning steps are bounded.
  l = small_layout(json::array({{{"match", "*"}, {"dim", 0}}}), 65536, 1, 1024);
  l["trainer"]["holdings"] = {{{"match", "*"}, {"shard_dim", 0}}};
  l["parameters"] = json::array();
  for (int i = 0; i < 10; ++i)
    l["parameters"].push_back(
        {{"name", "s" + std::to_string(i)}, {"dtype", "float32"}, {"shape", {int64_t{1} << 26}}});
  const Layout wide = layout_from_json(l, "layout");
  EXPECT_THAT(error_of([&] { compute_plan(wide); }),
              HasSubstr("planning would take more than 16777216 steps"));
}

TEST(M2nPlan, AWorkersPlanThatCoversAParameterTwiceOrNotAtAllIsRefused) {
  const json good = plan_to_json(compute_plan(layout_from_json(small_layout(), "layout")));
  json twice = good;
  auto& pieces = twice["groups"][0]["pieces"];
  pieces.push_back(pieces[0]);
  EXPECT_THAT(error_of([&] { plan_from_json(twice, "init_info plan"); }),
              HasSubstr("parameter 'w0' (and 2 more like it) is covered twice for tensor-parallel "
                        "rank 0: pieces overlap"));
  json missing = good;
  missing["groups"][0]["pieces"].erase(0);
  EXPECT_THAT(error_of([&] { plan_from_json(missing, "init_info plan"); }),
              HasSubstr("is not covered for tensor-parallel rank 0: elements 0..2 of dim 0 are in "
                        "no piece"));
  json crossed = good;  // a piece that cuts the box along a second dimension
  crossed["groups"][0]["pieces"][0]["hi"][1] = 1;
  EXPECT_THAT(error_of([&] { plan_from_json(crossed, "plan"); }),
              HasSubstr("are not slices along one dimension"));
  // Sizes that wrap 64 bits cannot fake coverage.
  json wrap = {{"version", 1},
               {"trainer_ranks", 1},
               {"replicas", 1},
               {"tensor_parallel", 1},
               {"groups",
                {{{"names", {"w"}},
                  {"dtype", "float32"},
                  {"shape", {int64_t{1} << 40, (int64_t{1} << 24) + 1}},
                  {"tp_dim", -1},
                  {"pieces",
                   {{{"tp", 0},
                     {"lo", {0, 0}},
                     {"hi", {int64_t{1} << 40, 1}},
                     {"holders", {0}},
                     {"first", 0}}}}}}}};
  EXPECT_THAT(error_of([&] { plan_from_json(wrap, "plan"); }),
              HasSubstr("the shape has more than 2^50 elements"));
  json named_twice = good;
  named_twice["groups"][1]["names"].push_back("w1");
  EXPECT_THAT(error_of([&] { plan_from_json(named_twice, "plan"); }),
              HasSubstr("parameter 'w1' is covered twice: it appears in two groups"));
  json outside = good;
  outside["groups"][0]["pieces"][0]["hi"][0] = 7;
  EXPECT_THAT(error_of([&] { plan_from_json(outside, "plan"); }), HasSubstr("outside what"));
  json stranger = good;
  stranger["groups"][0]["pieces"][0]["holders"] = {5};
  EXPECT_THAT(error_of([&] { plan_from_json(stranger, "plan"); }),
              HasSubstr("every element of 'holders' must be an integer in 0..2"));
  json newer = good;
  newer["version"] = 2;
  EXPECT_THAT(error_of([&] { plan_from_json(newer, "plan"); }), HasSubstr("plan version is not 1"));
}

TEST(M2nPlan, AWorkerWhoseModelDisagreesWithThePlanIsRefusedNamingTheFirstDifference) {
  const Plan plan = compute_plan(layout_from_json(small_layout(), "layout"));
  const DLDataType f32{kDLFloat, 32, 1}, bf16{kDLBfloat, 16, 1};
  std::vector<WorkerParam> model;
  for (int i = 0; i < 3; ++i) model.push_back({"w" + std::to_string(i), f32, {6, 2}});
  model.push_back({"b", bf16, {5}});
  for (int i = 0; i < 7; ++i) model.push_back({"v" + std::to_string(i), f32, {4, 2}});
  check_worker(plan, 3, model);  // replica 1, tp rank 1: fits
  auto wrong = model;
  wrong[1].local_shape = {3, 4};
  EXPECT_THAT(error_of([&] { check_worker(plan, 1, wrong); }),
              HasSubstr("the m2n plan does not fit worker rank 1: parameter 'w1' is planned as "
                        "float32 [6, 2] for tensor-parallel rank 1, but this worker holds it as "
                        "float32 [3, 4]"));
  wrong = model;
  wrong[3].dtype = f32;
  EXPECT_THAT(error_of([&] { check_worker(plan, 0, wrong); }),
              HasSubstr("parameter 'b' is planned as bfloat16"));
  wrong = model;
  wrong.erase(wrong.begin() + 4);
  EXPECT_THAT(error_of([&] { check_worker(plan, 0, wrong); }),
              HasSubstr("the plan sends parameter 'v0', which this worker does not hold"));
  wrong = model;
  wrong.push_back({"extra", f32, {1}});
  EXPECT_THAT(error_of([&] { check_worker(plan, 0, wrong); }),
              HasSubstr("this worker holds parameter 'extra', which no plan entry covers"));
  EXPECT_THAT(error_of([&] { check_worker(plan, 4, model); }),
              HasSubstr("worker rank 4 is not in 0..3"));
}

TEST(M2nPlan, TheShippedOneTrillionParameterLayoutPlansBalancedAndCovered) {
  const std::string path = std::string(WT_SOURCE_DIR) + "/configs/layouts/kimi-k2-1t.json";
  const Layout layout = layout_from_json(yaml_to_json(load_yaml_file(path), path), path);
  const Plan plan = compute_plan(layout);
  const PlanStats s = plan_stats(plan);
  double params = 0;
  for (const GroupPlan& g : plan.groups) {
    double n = 1;
    for (int64_t d : g.shape) n *= static_cast<double>(d);
    params += n * static_cast<double>(g.names.size());
  }
  EXPECT_GT(params, 1.0e12);
  EXPECT_LT(params, 1.1e12);
  EXPECT_EQ(s.trainer_bytes.size(), 256u);
  EXPECT_EQ(s.worker_bytes.size(), 128u);
  // Every replica receives the model once; within a replica the TP ranks share it.
  uint64_t received = 0;
  for (uint64_t b : s.worker_bytes) received += b;
  const uint64_t replicated_extra = received - 16 * s.model_bytes;  // whole tensors on every rank
  EXPECT_LT(static_cast<double>(replicated_extra), 0.05 * 16 * static_cast<double>(s.model_bytes));
  const auto [lo, hi] = std::minmax_element(s.trainer_bytes.begin(), s.trainer_bytes.end());
  EXPECT_LT(static_cast<double>(*hi), 1.05 * static_cast<double>(*lo)) << "trainer ranks balanced";
  // The workers' form covers every parameter exactly once, as the plan says.
  EXPECT_EQ(plan_digest(plan_from_json(plan_to_json(plan), "plan")), plan_digest(plan));
}

// Block FP8 on the wire: the 1 T layout's replica receives at most 0.51 of what it receives as
// held, and the makespan falls with it, at both replica widths. Printed against the anchor's
// figures at 50 GB/s per link (16 x TP 8: 2.6 s; 8 x TP 16: 1.3 s), which count the model's bytes
// over a replica's links: a worker here also receives the tensors every TP rank holds whole (MLA's
// down projections, the routers in bf16), about 1 % more at TP 16.
// Which parameters go FP8 (block_fp8_layout_test.cpp has the rest of block FP8).
TEST(M2nPlan, BlockFp8SendsProjectionsAndExpertsAndKeepsEmbeddingsNormsAndRouters) {
  const DLDataType bf16{kDLBfloat, 16, 1};
  EXPECT_TRUE(sent_as_fp8("model.layers.3.mlp.experts.7.down_proj.weight", {7168, 2048}, bf16));
  EXPECT_TRUE(sent_as_fp8("model.layers.3.self_attn.q_b_proj.weight", {12288, 1536}, bf16));
  EXPECT_FALSE(sent_as_fp8("model.embed_tokens.weight", {163840, 7168}, bf16));
  EXPECT_FALSE(sent_as_fp8("lm_head.weight", {163840, 7168}, bf16));
  EXPECT_FALSE(sent_as_fp8("model.layers.3.mlp.gate.weight", {384, 7168}, bf16));
  EXPECT_FALSE(sent_as_fp8("model.layers.3.input_layernorm.weight", {7168}, bf16));
  EXPECT_FALSE(sent_as_fp8("model.layers.3.mlp.w", {64, 64}, DLDataType{kDLInt, 32, 1}));
}

}  // namespace
}  // namespace wt::m2n
