// Engine-format layouts: fused projections, stacked experts and tied names composed from the
// trainer's parameters, each part's TP slice at its own offset in the engine's tensor, every rule
// that cannot compose refused naming the rule and the parameter, and the worker's model checked
// against the engine's tensors, naming the first disagreement.
#include "engine_layout.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/errors.hpp>
#include <wt/services/yaml_json.hpp>
#include "support/invalid_argument.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

namespace wt::m2n {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

const DLDataType bf16{kDLBfloat, 16, 1};
const DLDataType f32{kDLFloat, 32, 1};

std::string error_of(const std::function<void()>& f) {
  return test::invalid_argument_of(f);
}

// Two layers of attention and MLP, two experts per layer, a norm and an embedding; TP 2 splits
// the projections along dim 0 and the experts' down projections along dim 1.
Plan small_plan(int tp = 2) {
  json params = json::array();
  auto add = [&](const std::string& name, std::vector<int64_t> shape, const char* dtype,
                 json ranges = json()) {
    json p = {{"name", name}, {"dtype", dtype}, {"shape", shape}};
    if (!ranges.is_null()) p["ranges"] = ranges;
    params.push_back(p);
  };
  const json layers = {{0, 2}};
  add("embed.weight", {16, 8}, "bfloat16");
  add("layers.{}.q_proj.weight", {8, 8}, "bfloat16", layers);
  add("layers.{}.k_proj.weight", {4, 8}, "bfloat16", layers);
  add("layers.{}.v_proj.weight", {4, 8}, "bfloat16", layers);
  add("layers.{}.norm.weight", {8}, "float32", layers);
  add("layers.{}.experts.{}.w1.weight", {6, 8}, "bfloat16", {{0, 2}, {0, 2}});
  add("layers.{}.experts.{}.w3.weight", {6, 8}, "bfloat16", {{0, 2}, {0, 2}});
  add("layers.{}.experts.{}.w2.weight", {8, 6}, "bfloat16", {{0, 2}, {0, 2}});
  const json layout = {
      {"parameters", params},
      {"trainer", {{"ranks", 2}, {"holdings", {{{"match", "*"}, {"shard_dim", 0}}}}}},
      {"inference",
       {{"replicas", 1},
        {"tensor_parallel", tp},
        {"rules",
         {{{"match", "*.w2.weight"}, {"dim", 1}},
          {{"match", "*_proj.weight"}, {"dim", 0}},
          {{"match", "*.w?.weight"}, {"dim", 0}},
          {{"match", "embed.weight"}, {"dim", 0}}}}}}};
  return compute_plan(layout_from_json(layout, "small layout"));
}

std::vector<EngineRule> rules_of(const json& j) {
  return engine_rules_from_json(j, "engine_layout");
}

const json kEngineRules = json::parse(R"([
  {"fuse": "*.qkv_proj.weight", "parts": ["*.q_proj.weight", "*.k_proj.weight", "*.v_proj.weight"]},
  {"stack": "*.experts.w13_weight", "experts": 2,
   "parts": ["*.experts.#.w1.weight", "*.experts.#.w3.weight"]},
  {"stack": "*.experts.w2_weight", "experts": 2, "parts": ["*.experts.#.w2.weight"]},
  {"tie": "lm_head.weight", "to": "embed.weight"}
])");

TEST(EngineLayout, FusedProjectionsStackedExpertsAndATiedHeadComposeFromEachPartsTpSlice) {
  const Plan plan = small_plan();
  const EngineLayout e = compose_engine(plan, rules_of(kEngineRules), "engine_layout");
  std::map<std::string, const EngineTensor*> by_name;
  for (const auto& t : e.tensors) by_name[t.name] = &t;
  // embed, per layer qkv, norm, w13, w2; lm_head.
  ASSERT_EQ(e.tensors.size(), 1u + 2 * 4 + 1);
  EXPECT_EQ(e.composed, 2u * 3 + 1);
  // A TP rank's qkv_proj is its slice of q (4 rows), then of k (2), then of v (2).
  ASSERT_TRUE(by_name.count("layers.1.qkv_proj.weight"));
  EXPECT_EQ(by_name["layers.1.qkv_proj.weight"]->local_shape, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(e.place_of("layers.1.q_proj.weight").element_offset, 0u);
  EXPECT_EQ(e.place_of("layers.1.k_proj.weight").element_offset, 4u * 8);
  EXPECT_EQ(e.place_of("layers.1.v_proj.weight").element_offset, 6u * 8);
  EXPECT_EQ(e.place_of("layers.1.k_proj.weight").tensor,
            e.place_of("layers.1.q_proj.weight").tensor);
  // [experts, w1 slice (3 rows) + w3 slice (3 rows), 8]: expert e at e * 48, w3 3 rows in.
  EXPECT_EQ(by_name["layers.0.experts.w13_weight"]->local_shape, (std::vector<int64_t>{2, 6, 8}));
  EXPECT_EQ(e.place_of("layers.0.experts.0.w1.weight").element_offset, 0u);
  EXPECT_EQ(e.place_of("layers.0.experts.0.w3.weight").element_offset, 3u * 8);
  EXPECT_EQ(e.place_of("layers.0.experts.1.w1.weight").element_offset, 48u);
  EXPECT_EQ(e.place_of("layers.0.experts.1.w3.weight").element_offset, 48u + 24);
  // The down projections split along dim 1: [experts, 8, 3].
  EXPECT_EQ(by_name["layers.1.experts.w2_weight"]->local_shape, (std::vector<int64_t>{2, 8, 3}));
  EXPECT_EQ(e.place_of("layers.1.experts.1.w2.weight").element_offset, 24u);
  // The norm, which no rule takes, is an engine tensor under its own name; the head is the
  // embedding under a second name, with no part of its own.
  EXPECT_EQ(by_name["layers.0.norm.weight"]->local_shape, (std::vector<int64_t>{8}));
  ASSERT_TRUE(by_name.count("lm_head.weight"));
  EXPECT_EQ(e.tensors[static_cast<std::size_t>(by_name["lm_head.weight"]->tied_to)].name,
            "embed.weight");
  EXPECT_EQ(by_name["lm_head.weight"]->local_shape, (std::vector<int64_t>{8, 8}));
  // Every planned parameter has exactly one place, and the parts fill each engine tensor: the
  // elements placed in a tensor are its elements, none twice.
  std::map<uint32_t, uint64_t> placed;
  for (const auto& p : planned_params(plan, 0)) {
    uint64_t n = 1;
    for (int64_t d : p.local_shape) n *= static_cast<uint64_t>(d);
    placed[e.place_of(p.name).tensor] += n;
  }
  for (uint32_t t = 0; t < e.tensors.size(); ++t) {
    uint64_t n = 1;
    for (int64_t d : e.tensors[t].local_shape) n *= static_cast<uint64_t>(d);
    EXPECT_EQ(placed[t], e.tensors[t].tied_to >= 0 ? 0 : n) << e.tensors[t].name;
  }
}

TEST(EngineLayout, NoRulesIsThePlanItself) {
  const Plan plan = small_plan();
  const EngineLayout e = compose_engine(plan, {}, "engine_layout");
  const auto planned = planned_params(plan, 1);
  ASSERT_EQ(e.tensors.size(), planned.size());
  for (std::size_t i = 0; i < planned.size(); ++i) {
    EXPECT_EQ(e.tensors[i].name, planned[i].name);
    EXPECT_EQ(e.tensors[i].local_shape, planned[i].local_shape);
    EXPECT_EQ(e.place_of(planned[i].name).element_offset, 0u);
  }
  EXPECT_EQ(e.composed, 0u);
}

TEST(EngineLayout, RulesRoundTripThroughJson) {
  const auto rules = rules_of(kEngineRules);
  EXPECT_EQ(rules_of(engine_rules_to_json(rules)), rules);
}

TEST(EngineLayout, EveryRuleThatCannotComposeIsRefusedNamingTheRuleAndTheParameter) {
  const Plan plan = small_plan();
  auto refused = [&](const char* rules) {
    return error_of([&] { compose_engine(plan, rules_of(json::parse(rules)), "engine_layout"); });
  };
  EXPECT_THAT(
      refused(R"([{"fuse": "*.qkv.weight", "parts": ["*.q_proj.weight", "*.o_proj.weight"]}])"),
      HasSubstr("invalid engine_layout[0]: engine parameter 'layers.0.qkv.weight' is made "
                "of 'layers.0.o_proj.weight', which the trainer does not send"));
  EXPECT_THAT(refused(R"([{"fuse": "*.a.weight", "parts": ["*.q_proj.weight", "*.k_proj.weight"]},
                  {"fuse": "*.b.weight", "parts": ["*.v_proj.weight", "*.k_proj.weight"]}])"),
              HasSubstr("invalid engine_layout[1]: 'layers.0.k_proj.weight' is a part of engine "
                        "parameter 'layers.0.a.weight' (engine_layout[0]) already"));
  EXPECT_THAT(refused(R"([{"fuse": "*.qn", "parts": ["*.q_proj.weight", "*.norm.weight"]}])"),
              HasSubstr("invalid engine_layout[0]: 'layers.0.norm.weight' (float32 [8] per TP "
                        "rank) does not fuse with the parts before it into 'layers.0.qn' "
                        "(bfloat16 [*, 8])"));
  EXPECT_THAT(
      refused(R"([{"fuse": "*.x", "parts": ["*.q_proj.weight", "*.experts.0.w2.weight"]}])"),
      HasSubstr("'layers.0.experts.0.w2.weight' (bfloat16 [8, 3] per TP rank) does not fuse"));
  EXPECT_THAT(refused(R"([{"fuse": "*.norm.weight", "parts": ["*.q_proj.weight"]}])"),
              HasSubstr("engine parameter 'layers.0.norm.weight' is made twice"));
  EXPECT_THAT(refused(R"([{"stack": "*.experts.w2_weight", "experts": 3,
                           "parts": ["*.experts.#.w2.weight"]}])"),
              HasSubstr("engine parameter 'layers.0.experts.w2_weight' is made of "
                        "'layers.0.experts.2.w2.weight', which the trainer does not send"));
  EXPECT_THAT(refused(R"([{"tie": "lm_head.weight", "to": "head.weight"}])"),
              HasSubstr("invalid engine_layout[0]: 'lm_head.weight' is tied to 'head.weight', "
                        "which is not an engine parameter the plan sends"));
  EXPECT_THAT(refused(R"([{"tie": "layers.0.norm.weight", "to": "embed.weight"}])"),
              HasSubstr("the trainer sends 'layers.0.norm.weight' too: a tied name is sent once"));
  EXPECT_THAT(refused(R"([{"fuse": "*.kv.weight", "parts": ["*.k_proj.weight", "*.v_proj.weight"]},
                          {"tie": "kv_alias", "to": "layers.0.k_proj.weight"}])"),
              HasSubstr("invalid engine_layout[1]: 'kv_alias' is tied to 'layers.0.k_proj.weight', "
                        "which is a part of engine parameter 'layers.0.kv.weight' "
                        "(engine_layout[0]): tie to 'layers.0.kv.weight'"));
  EXPECT_THAT(refused(R"([{"tie": "a", "to": "embed.weight"}, {"tie": "b", "to": "a"}])"),
              HasSubstr("'b' is tied to 'a', which is a tied name itself: tie to 'embed.weight'"));
  // A rule that matches nothing is a typo, not a no-op.
  EXPECT_THAT(
      refused(R"([{"fuse": "*.qkv.weight", "parts": ["*.query.weight", "*.k_proj.weight"]}])"),
      HasSubstr("invalid engine_layout[0]: no trainer parameter that an earlier rule did "
                "not take matches its first part '*.query.weight': the rule composes "
                "nothing"));
  // Two experts stacked as one would leave the second out of its stack.
  EXPECT_THAT(refused(R"([{"stack": "*.experts.w2_weight", "experts": 1,
                           "parts": ["*.experts.#.w2.weight"]}])"),
              HasSubstr("'layers.0.experts.1.w2.weight' is sent too: "
                        "'layers.0.experts.w2_weight' stacks 1 experts, the model has more"));
}

// Experts of another dtype, a part two patterns both name, parts TP splits differently, each
// refused naming the part; and rules of unbounded size.
TEST(EngineLayout, StackedExpertsOfAnotherDtypeOrSplitAndPartsNamedTwiceAreRefused) {
  json params = json::array();
  params.push_back(
      {{"name", "e{}.w"}, {"ranges", {{0, 2}}}, {"dtype", "float32"}, {"shape", {4, 4}}});
  params.push_back({{"name", "e2.w"}, {"dtype", "bfloat16"}, {"shape", {4, 4}}});
  params.push_back(
      {{"name", "e1{}.w"}, {"ranges", {{0, 1}}}, {"dtype", "float32"}, {"shape", {4, 4}}});
  params.push_back({{"name", "a.w"}, {"dtype", "float32"}, {"shape", {4, 4}}});
  params.push_back({{"name", "b.w"}, {"dtype", "float32"}, {"shape", {2, 8}}});
  params.push_back({{"name", "xx"}, {"dtype", "float32"}, {"shape", {4, 4}}});
  const json layout = {
      {"parameters", params},
      {"trainer", {{"ranks", 1}, {"holdings", {{{"match", "*"}, {"replicated", true}}}}}},
      {"inference",
       {{"replicas", 1},
        {"tensor_parallel", 2},
        {"rules", {{{"match", "b.w"}, {"dim", 1}}, {{"match", "a.w"}, {"dim", 0}}}}}}};
  const Plan plan = compute_plan(layout_from_json(layout, "layout"));
  auto refused = [&](const char* rules) {
    return error_of([&] { compose_engine(plan, rules_of(json::parse(rules)), "engine_layout"); });
  };
  EXPECT_THAT(refused(R"([{"stack": "stacked", "experts": 3, "parts": ["e#.w"]}])"),
              HasSubstr("invalid engine_layout[0]: 'e2.w' is bfloat16 [4, 4] per TP rank, the "
                        "same part of expert 0 float32 [4, 4]: stacked experts share their "
                        "dtypes, shapes and TP splits"));
  // "*x" and "x*" both stand for "xx" when '*' is "x".
  EXPECT_THAT(refused(R"([{"fuse": "f*", "parts": ["*x", "x*"]}])"),
              HasSubstr("'xx' is named twice as a part of engine parameter 'fx'"));
  EXPECT_THAT(refused(R"([{"fuse": "ab", "parts": ["a.w", "b.w"]}])"),
              HasSubstr("invalid engine_layout[0]: 'b.w' is split by tensor parallelism along "
                        "dimension 1, the parts before it in 'ab' along dimension 0"));
  EXPECT_THAT(
      error_of([] { rules_of(json::parse(R"([{"fuse": "x", "parts": ["a.w", "a.w"]}])")); }),
      HasSubstr("part 'a.w' is listed twice"));
  EXPECT_THAT(error_of([] {
                rules_of(json::array({{{"fuse", std::string(600, 'x')}, {"parts", {"a"}}}}));
              }),
              HasSubstr("'fuse' is longer than 512 characters"));
}

TEST(EngineLayout, RulesOfTheWrongFormAreRefusedNamingTheField) {
  auto refused = [](const char* rules) { return error_of([&] { rules_of(json::parse(rules)); }); };
  EXPECT_THAT(refused(R"({"fuse": "x"})"),
              HasSubstr("invalid engine_layout: the engine layout must be a list of rules"));
  EXPECT_THAT(refused(R"([{"fuse": "*.a", "stack": "*.b", "parts": ["*.c"]}])"),
              HasSubstr("invalid engine_layout[0]: give exactly one of \"fuse\", \"stack\" or "
                        "\"tie\""));
  EXPECT_THAT(refused(R"([{"fuse": "*.a", "parts": ["b"]}])"),
              HasSubstr("part 'b' must hold 1 '*', as the engine name '*.a' does"));
  EXPECT_THAT(refused(R"([{"fuse": "*.a", "parts": ["*.#.b"]}])"),
              HasSubstr("part '*.#.b' holds a '#': only a \"stack\" numbers experts"));
  EXPECT_THAT(refused(R"([{"stack": "*.a", "experts": 4, "parts": ["*.b"]}])"),
              HasSubstr("part '*.b' must hold one '#' (the expert's number)"));
  EXPECT_THAT(refused(R"([{"stack": "*.a", "experts": 0, "parts": ["*.#.b"]}])"),
              HasSubstr("experts"));
  EXPECT_THAT(refused(R"([{"fuse": "*.a", "parts": []}])"),
              HasSubstr("'parts' must list 1 to 64 parameter patterns"));
  EXPECT_THAT(refused(R"([{"fuse": "*.a", "parts": ["*.b"], "dim": 1}])"), HasSubstr("dim"));
  EXPECT_THAT(refused(R"([{"tie": "a", "to": "a"}])"),
              HasSubstr("a parameter cannot be tied to itself"));
  EXPECT_THAT(refused(R"([{"tie": "*.a", "to": "b"}])"),
              HasSubstr("a tie names two parameters, without '*' or '#'"));
}

TEST(EngineLayout, TheWorkersModelIsCheckedAgainstTheEngineTensorsNamingTheFirstDisagreement) {
  const Plan plan = small_plan();
  const EngineLayout e = compose_engine(plan, rules_of(kEngineRules), "engine_layout");
  auto model = engine_params(e);
  check_held_params(engine_params(e), model, 1, 1);  // fits
  auto wrong = model;
  for (auto& p : wrong)
    if (p.name == "layers.0.qkv_proj.weight") p.local_shape = {16, 8};  // unsliced
  EXPECT_THAT(error_of([&] { check_held_params(engine_params(e), wrong, 1, 1); }),
              HasSubstr("the m2n plan does not fit worker rank 1: parameter "
                        "'layers.0.qkv_proj.weight' is planned as bfloat16 [8, 8] for "
                        "tensor-parallel rank 1, but this worker holds it as bfloat16 [16, 8]"));
  // A worker that holds the trainer's names where the engine fuses them.
  EXPECT_THAT(error_of([&] { check_held_params(engine_params(e), planned_params(plan, 0), 0, 0); }),
              HasSubstr("the plan sends parameter 'layers.0.qkv_proj.weight', which this worker "
                        "does not hold"));
}

TEST(EngineLayout, TheShippedEngineFormatOneTrillionLayoutComposesEveryExpert) {
  const std::string path = std::string(WT_SOURCE_DIR) + "/configs/layouts/kimi-k2-1t-engine.json";
  const Layout layout = layout_from_json(yaml_to_json(load_yaml_file(path), path), path);
  ASSERT_FALSE(layout.engine.empty());
  const Plan plan = compute_plan(layout);
  const EngineLayout e = compose_engine(plan, layout.engine, path);
  std::map<std::string, const EngineTensor*> by_name;
  for (const auto& t : e.tensors) by_name[t.name] = &t;
  // vLLM's DeepSeek-V3 at TP 8: fused_qkv_a_proj replicated, gate_up of the dense layer and the
  // shared experts split, 384 experts stacked per MoE layer.
  ASSERT_TRUE(by_name.count("model.layers.0.self_attn.fused_qkv_a_proj.weight"));
  EXPECT_EQ(by_name["model.layers.0.self_attn.fused_qkv_a_proj.weight"]->local_shape,
            (std::vector<int64_t>{1536 + 576, 7168}));
  EXPECT_EQ(by_name["model.layers.0.mlp.gate_up_proj.weight"]->local_shape,
            (std::vector<int64_t>{2 * 18432 / 8, 7168}));
  EXPECT_EQ(by_name["model.layers.5.mlp.shared_experts.gate_up_proj.weight"]->local_shape,
            (std::vector<int64_t>{2 * 2048 / 8, 7168}));
  EXPECT_EQ(by_name["model.layers.60.mlp.experts.w13_weight"]->local_shape,
            (std::vector<int64_t>{384, 2 * 2048 / 8, 7168}));
  EXPECT_EQ(by_name["model.layers.60.mlp.experts.w2_weight"]->local_shape,
            (std::vector<int64_t>{384, 7168, 2048 / 8}));
  // No expert left under its trainer name.
  EXPECT_FALSE(by_name.count("model.layers.1.mlp.experts.0.gate_proj.weight"));
  EXPECT_EQ(e.composed, 61u + 1 + 60 * 3);
}

// The rules of docs/m2n.md's "Engine-format layouts", as written, on a model of those names.
TEST(EngineLayout, TheDocsRulesComposeAModelOfTheirNames) {
  std::ifstream in(std::string(WT_SOURCE_DIR) + "/docs/m2n.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const auto section = doc.find("### Engine-format layouts");
  ASSERT_NE(section, std::string::npos);
  const auto open = doc.find("```yaml\n", section);
  ASSERT_NE(open, std::string::npos);
  const auto close = doc.find("```", open + 8);
  const std::string yaml = doc.substr(open + 8, close - open - 8);
  const json j = yaml_to_json(load_yaml(yaml, "docs/m2n.md"), "docs/m2n.md");
  const auto rules = rules_of(j.at("engine_layout"));
  json params = json::array();
  const json layers = {{0, 2}};
  for (const char* p : {"q_proj", "k_proj", "v_proj"})
    params.push_back({{"name", fmt::format("model.layers.{{}}.self_attn.{}.weight", p)},
                      {"ranges", layers},
                      {"dtype", "bfloat16"},
                      {"shape", {8, 8}}});
  for (const char* p : {"gate_proj", "up_proj"}) {
    params.push_back({{"name", fmt::format("model.layers.{{}}.mlp.{}.weight", p)},
                      {"ranges", {{0, 1}}},
                      {"dtype", "bfloat16"},
                      {"shape", {16, 8}}});
    params.push_back({{"name", fmt::format("model.layers.{{}}.mlp.experts.{{}}.{}.weight", p)},
                      {"ranges", {{1, 2}, {0, 384}}},
                      {"dtype", "bfloat16"},
                      {"shape", {4, 8}}});
  }
  params.push_back({{"name", "model.layers.{}.mlp.experts.{}.down_proj.weight"},
                    {"ranges", {{1, 2}, {0, 384}}},
                    {"dtype", "bfloat16"},
                    {"shape", {8, 4}}});
  params.push_back(
      {{"name", "model.embed_tokens.weight"}, {"dtype", "bfloat16"}, {"shape", {32, 8}}});
  const json layout = {
      {"parameters", params},
      {"trainer", {{"ranks", 1}, {"holdings", {{{"match", "*"}, {"replicated", true}}}}}},
      {"inference", {{"replicas", 1}, {"tensor_parallel", 1}}}};
  const EngineLayout e =
      compose_engine(compute_plan(layout_from_json(layout, "layout")), rules, "docs/m2n.md");
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& t : e.tensors) shapes[t.name] = t.local_shape;
  EXPECT_EQ(shapes.size(), 2u + 1 + 2 + 2);  // qkv x 2, gate_up, w13, w2, embed, lm_head
  EXPECT_EQ(shapes["model.layers.1.self_attn.qkv_proj.weight"], (std::vector<int64_t>{24, 8}));
  EXPECT_EQ(shapes["model.layers.0.mlp.gate_up_proj.weight"], (std::vector<int64_t>{32, 8}));
  EXPECT_EQ(shapes["model.layers.1.mlp.experts.w13_weight"], (std::vector<int64_t>{384, 8, 8}));
  EXPECT_EQ(shapes["model.layers.1.mlp.experts.w2_weight"], (std::vector<int64_t>{384, 8, 4}));
  EXPECT_EQ(shapes["lm_head.weight"], (std::vector<int64_t>{32, 8}));
}

}  // namespace
}  // namespace wt::m2n
