// What an m2n trainer rank declares at init (m2n_holdings): its holdings of the model every rank
// declares alike, in a few hundred bytes however large the model; read back exactly, for even
// FSDP splits (ranks holding less, or nothing), whole tensors and other slices; a rank whose model
// differs is named with the parameters that differ; malformed declarations are refused.
#include "m2n_holdings.hpp"
#include "m2n_plan.hpp"

#include <wt/sdk/errors.hpp>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

using ::testing::HasSubstr;

namespace wt::m2n {
namespace {

constexpr DLDataType kBf16{kDLBfloat, 16, 1};

// `count` parameters p0, p1, ... of shape [rows, 64], as rank `rank` of `ranks` holds them:
// every third whole, the others split evenly along dim 0, except parameter 7, an uneven slice.
std::vector<ParamMeta> model(std::size_t count, int64_t rows, int rank, int ranks) {
  std::vector<ParamMeta> out;
  for (std::size_t i = 0; i < count; ++i) {
    ParamMeta m{fmt::format("p{}", i), kBf16, {rows, 64}};
    if (i == 7) {
      m.shard_dim = 1;
      m.shard_offset = rank;
      m.shard_length = 1;
    } else if (i % 3 != 0) {
      const int64_t chunk = (rows + ranks - 1) / ranks, lo = std::min(rows, chunk * rank);
      m.shard_dim = 0;
      m.shard_offset = lo;
      m.shard_length = std::min(rows, lo + chunk) - lo;
    }
    out.push_back(m);
  }
  return out;
}

void expect_same(const std::vector<ParamMeta>& got, const std::vector<ParamMeta>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_TRUE(got[i].dtype == want[i].dtype) << want[i].name;
    EXPECT_EQ(got[i].shape, want[i].shape) << want[i].name;
    EXPECT_EQ(got[i].shard_dim, want[i].shard_dim) << want[i].name;
    EXPECT_EQ(got[i].shard_offset, want[i].shard_offset) << want[i].name;
    EXPECT_EQ(got[i].shard_length, want[i].shard_length) << want[i].name;
  }
}

// 10 rows over 4 ranks: chunks of 3, rank 3 holds 1 row; over 12 ranks, ranks 10 and 11 none.
TEST(M2nHoldings, EveryRanksDeclarationReadsBackExactly) {
  for (int ranks : {1, 4, 12})
    for (int rank = 0; rank < ranks; ++rank) {
      const auto own = model(40, 10, 0, ranks), mine = model(40, 10, rank, ranks);
      const auto declared = holdings_declaration(mine, rank, ranks);
      expect_same(RankHoldings::from_declaration(declared, rank, ranks, own).expand(own), mine);
    }
}

TEST(M2nHoldings, ADeclarationStaysSmallHoweverLargeTheModel) {
  std::vector<ParamMeta> big;
  for (std::size_t i = 0; i < 70'000; ++i) {  // a 1 T model's tensor count, split evenly
    ParamMeta m{fmt::format("layers.{}.w", i), kBf16, {2048, 7168}};
    m.shard_dim = 0;
    m.shard_offset = 8 * 5;
    m.shard_length = 8;
    big.push_back(m);
  }
  const std::string text = holdings_declaration(big, 5, 256).dump();
  EXPECT_LT(text.size(), 1024u) << text;
  expect_same(RankHoldings::from_declaration(nlohmann::json::parse(text), 5, 256, big).expand(big),
              big);
}

TEST(M2nHoldings, ARankWhoseModelDiffersIsNamedWithTheParametersThatDiffer) {
  const auto own = model(10'000, 10, 0, 4);
  auto theirs = model(10'000, 10, 2, 4);
  theirs[5000].shape = {10, 65};
  try {
    RankHoldings::from_declaration(holdings_declaration(theirs, 2, 4), 2, 4, own);
    FAIL() << "another model was accepted";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
    EXPECT_THAT(e.what(), HasSubstr("trainer rank 2 declares another model than this rank: the "
                                    "names, dtypes or shapes of parameters 4096 to 8191 ('p4096' "
                                    "to 'p8191') differ"));
  }
  try {
    RankHoldings::from_declaration(holdings_declaration(model(9, 10, 1, 4), 1, 4), 1, 4, own);
    FAIL() << "a model of another size was accepted";
  } catch (const sdk::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("trainer rank 1 declares 9 parameters, this rank 10000"));
  }
}

TEST(M2nHoldings, AMalformedDeclarationIsRefusedNamingTheRank) {
  const auto own = model(12, 10, 0, 4);
  const auto good = holdings_declaration(model(12, 10, 3, 4), 3, 4);
  auto expect_refused = [&](nlohmann::json j, const std::string& why) {
    try {
      RankHoldings::from_declaration(j, 3, 4, own);
      FAIL() << "accepted: " << j.dump();
    } catch (const sdk::Error& e) {
      EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
      EXPECT_THAT(e.what(), HasSubstr("trainer rank 3")) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(why)) << e.what();
    }
  };
  auto j = good;
  j["runs"][0][0] = 1000;
  expect_refused(j, "its runs do not add up to 12 parameters");
  j = good;
  j["runs"] = nlohmann::json::array({{12, 5}});
  expect_refused(j, "'p0' has no dimension 5");
  j = good;
  j["runs"] = nlohmann::json::array({{12, -7}});
  expect_refused(j, "a run of code -7");
  j = good;
  j["slices"] = nlohmann::json::array();
  expect_refused(j, "fewer slices than its runs name");
  j = good;
  j["slices"][0][2] = 1000;  // parameter 7's slice, past its 64 columns
  expect_refused(j, "its slice of 'p7' is out of the tensor");
  j = good;
  j.erase("model");
  expect_refused(j, "malformed");
}

// What rank `rank` of a layout holds, as its source would declare it.
std::vector<ParamMeta> source_of(const Layout& layout, int rank) {
  std::vector<ParamMeta> meta;
  for (const auto& g : layout.groups) {
    const Held* held = nullptr;
    for (const Held& h : *g.holdings)
      if (h.rank == rank) held = &h;
    for (const auto& name : g.names) {
      ParamMeta m{name, g.dtype, g.shape};
      if (held == nullptr) {  // none of it: an empty slice
        m.shard_dim = 0;
        m.shard_offset = g.shape[0];
      } else if (held->dim >= 0) {
        m.shard_dim = held->dim;
        m.shard_offset = held->lo;
        m.shard_length = held->hi - held->lo;
      }
      meta.push_back(std::move(m));
    }
  }
  return meta;
}

// The plan the trainer ranks make from what they declare is the plan `wt plan` makes from the
// layout, where the layout's groups differ in dtype, shape, holdings or TP rule (the ranks group by
// those alone): FSDP splits (5 ranks: the last holds less, over 12 rows), replicated tensors, a
// parameter split along another dimension.
TEST(M2nHoldings, TheRanksDeclarationsMakeThePlanOfTheLayout) {
  const nlohmann::json j = {
      {"parameters",
       {{{"name", "n{}"}, {"ranges", {{0, 9}}}, {"dtype", "float32"}, {"shape", {12, 64}}},
        {{"name", "b{}"}, {"ranges", {{0, 4}}}, {"dtype", "bfloat16"}, {"shape", {48}}},
        {{"name", "e{}"}, {"ranges", {{0, 3}}}, {"dtype", "float32"}, {"shape", {6, 10}}}}},
      {"trainer",
       {{"ranks", 5},
        {"holdings",
         {{{"match", "b*"}, {"replicated", true}},
          {{"match", "e*"}, {"shard_dim", 1}},
          {{"match", "*"}, {"shard_dim", 0}}}}}},
      {"inference",
       {{"replicas", 2}, {"tensor_parallel", 2}, {"rules", {{{"match", "n*"}, {"dim", 1}}}}}}};
  const Layout layout = layout_from_json(j, "test layout");
  const auto model = source_of(layout, 0);
  std::vector<RankHoldings> per_rank;
  for (int r = 0; r < layout.trainer_ranks; ++r)
    per_rank.push_back(RankHoldings::from_declaration(
        holdings_declaration(source_of(layout, r), r, layout.trainer_ranks), r,
        layout.trainer_ranks, model));
  const std::vector<TpRule> rules = {{"n*", 1}};
  const Plan from_ranks =
      compute_plan(layout_from_holdings(model, per_rank, layout.inference, rules));
  EXPECT_EQ(plan_digest(from_ranks), plan_digest(compute_plan(layout)));
  EXPECT_EQ(from_ranks.groups.size(), compute_plan(layout).groups.size());
}

}  // namespace
}  // namespace wt::m2n
