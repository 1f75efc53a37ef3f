// How m2n's pieces travel (m2n_schedule): both ends of every (trainer rank, worker rank) pair
// group the pair's pieces into the same messages, in the same order, so message n on a pair is
// the same bytes at both ends; small pieces share messages (bounded in size), large ones go
// alone.
#include "m2n_schedule.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

namespace wt::m2n {
namespace {

using json = nlohmann::json;

// 2 trainer ranks holding dim-0 shards → 2 replicas of TP 2 splitting dim 1: many small tiles
// (the "n*" and "b*" tensors), a few pieces of 1 MiB and more (the "big*" tensors).
Plan test_plan() {
  const json layout = {
      {"parameters",
       {{{"name", "n{}"}, {"ranges", {{0, 40}}}, {"dtype", "float32"}, {"shape", {8, 64}}},
        {{"name", "big{}"}, {"ranges", {{0, 3}}}, {"dtype", "float32"}, {"shape", {1024, 1024}}},
        {{"name", "b{}"}, {"ranges", {{0, 20}}}, {"dtype", "bfloat16"}, {"shape", {16}}}}},
      {"trainer", {{"ranks", 2}, {"holdings", {{{"match", "*"}, {"shard_dim", 0}}}}}},
      {"inference",
       {{"replicas", 2},
        {"tensor_parallel", 2},
        {"rules", {{{"match", "n*"}, {"dim", 1}}, {{"match", "big*"}, {"dim", 1}}}}}}};
  return compute_plan(layout_from_json(layout, "test layout"));
}

std::vector<std::string> names_of(const Plan& plan) {
  std::vector<std::string> names;
  for (const auto& g : plan.groups)
    for (const auto& n : g.names) names.push_back(n);
  return names;
}

// A pair's messages as what each carries: (parameter, box lo) per piece, message by message.
using Carried = std::vector<std::vector<std::pair<std::size_t, std::vector<int64_t>>>>;
std::map<int, Carried> per_peer(const std::vector<Transfer>& transfers,
                                const std::vector<Message>& messages) {
  std::map<int, Carried> out;
  for (const Message& m : messages) {
    auto& carried = out[m.peer].emplace_back();
    for (std::size_t i : m.transfers) {
      EXPECT_EQ(transfers[i].peer, m.peer);
      carried.push_back({transfers[i].param, transfers[i].piece->box.lo});
    }
  }
  return out;
}

// Both ends of every pair of `plan` list the same pieces in the same messages; returns the pieces
// and messages sent in all.
std::pair<std::size_t, std::size_t> expect_both_ends_agree(const Plan& plan) {
  const PlanIndex index(plan);
  const auto names = names_of(plan);
  const int workers = plan.inference.worker_ranks();
  std::size_t all_pieces = 0, all_messages = 0;
  // trainer → worker → what the pair's messages carry, from each end.
  std::map<std::pair<int, int>, Carried> sent, received;
  for (int t = 0; t < plan.trainer_ranks; ++t) {
    const auto sends = sends_of(plan, index, names, t);
    const auto messages = messages_of(sends, static_cast<std::size_t>(workers));
    all_pieces += sends.size();
    all_messages += messages.size();
    for (auto& [w, c] : per_peer(sends, messages)) sent[{t, w}] = c;
    // Every piece is in exactly one message, and the messages keep the order of first pieces.
    std::vector<int> seen(sends.size(), 0);
    std::size_t last_first = 0;
    for (const Message& m : messages) {
      EXPECT_FALSE(m.transfers.empty());
      if (m.transfers.empty()) continue;
      EXPECT_GE(m.transfers.front(), last_first);
      last_first = m.transfers.front();
      uint64_t bytes = 0;
      for (std::size_t i : m.transfers) {
        ++seen[i];
        bytes += sends[i].bytes;
        if (m.transfers.size() > 1) {
          EXPECT_LT(sends[i].bytes, kCoalesceBelow);
        }
      }
      EXPECT_EQ(bytes, m.bytes);
      if (m.transfers.size() > 1) {
        EXPECT_LE(m.bytes, kMessageBytes);
      }
    }
    for (int n : seen) EXPECT_EQ(n, 1);
  }
  for (int w = 0; w < workers; ++w) {
    const auto receives = receives_of(plan, index, names, w);
    for (auto& [t, c] : per_peer(receives, messages_of(receives, plan.trainer_ranks)))
      received[{t, w}] = c;
  }
  EXPECT_EQ(sent, received);
  EXPECT_EQ(sent.size(), static_cast<std::size_t>(plan.trainer_ranks * workers));
  return {all_pieces, all_messages};
}

TEST(M2nMessages, BothEndsOfEveryPairCarryTheSamePiecesInTheSameMessages) {
  const auto [all_pieces, all_messages] = expect_both_ends_agree(test_plan());
  // The 60 small tensors' tiles ride a few messages per pair; each big tensor's pieces go alone.
  EXPECT_LT(all_messages, all_pieces / 4) << all_messages << " messages for " << all_pieces;
}

// Replicated weights have every trainer rank as a holder, and the senders rotate over them: a
// rank sends only pieces it holds (sends_of looks at no others), and both ends still agree.
TEST(M2nMessages, BothEndsAgreeWhereSeveralRanksHoldAPiece) {
  const json layout = {
      {"parameters",
       {{{"name", "n{}"}, {"ranges", {{0, 12}}}, {"dtype", "float32"}, {"shape", {9, 64}}},
        {{"name", "b{}"}, {"ranges", {{0, 7}}}, {"dtype", "bfloat16"}, {"shape", {48}}},
        {{"name", "e{}"}, {"ranges", {{0, 5}}}, {"dtype", "float32"}, {"shape", {6, 10}}}}},
      {"trainer",
       {{"ranks", 3},
        {"holdings",
         {{{"match", "b*"}, {"replicated", true}},
          {{"match", "e*"}, {"shard_dim", 1}},
          {{"match", "*"}, {"shard_dim", 0}}}}}},
      {"inference",
       {{"replicas", 3}, {"tensor_parallel", 2}, {"rules", {{{"match", "n*"}, {"dim", 1}}}}}}};
  const Plan plan = compute_plan(layout_from_json(layout, "test layout"));
  std::size_t replicated = 0;
  for (const auto& g : plan.groups)
    for (const auto& p : g.pieces) replicated += p.holders.size() > 1;
  EXPECT_GT(replicated, 0u);
  const auto [all_pieces, all_messages] = expect_both_ends_agree(plan);
  EXPECT_GT(all_pieces, 0u);
  EXPECT_GT(all_messages, 0u);
}

TEST(M2nMessages, LargePiecesGoAloneAndSmallOnesFillMessagesUpToTheirBound) {
  Piece p;
  std::vector<Transfer> ts;
  // Peer 0: small pieces just under the threshold, enough to fill one message (kMessageBytes at
  // most) and start another with 4, then one piece at the threshold.
  const std::size_t per_message = kMessageBytes / (kCoalesceBelow - 1);
  const std::size_t small = per_message + 4;
  for (std::size_t i = 0; i < small; ++i) ts.push_back({0, &p, 0, kCoalesceBelow - 1});
  ts.push_back({0, &p, 0, kCoalesceBelow});
  ts.push_back({0, &p, 1, 10});  // peer 1 interleaved
  ts.push_back({0, &p, 0, 10});  // after the large piece: a new message, the pair's order kept
  const auto m = messages_of(ts, 2);
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].transfers.size(), per_message);
  EXPECT_LE(m[0].bytes, kMessageBytes);
  EXPECT_EQ(m[1].transfers.size(), 4u);
  EXPECT_EQ(m[2].transfers, std::vector<std::size_t>{small});
  EXPECT_EQ(m[3].peer, 1);
  EXPECT_EQ(m[4].transfers, std::vector<std::size_t>{small + 2});
}

TEST(M2nMessages, PiecesInPlaceAtBothEndsGoAloneFromALowerSize) {
  Piece p;
  // Under kInPlaceAlone, or not in place by the plan: coalesced; in place and at least
  // kInPlaceAlone: alone, so neither end copies it.
  std::vector<Transfer> ts = {{0, &p, 0, kInPlaceAlone - 1, true},
                              {0, &p, 0, kInPlaceAlone, false},
                              {0, &p, 0, kInPlaceAlone, true},
                              {0, &p, 0, 10, true}};
  const auto m = messages_of(ts, 1);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].transfers, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(m[1].transfers, std::vector<std::size_t>{2});
  EXPECT_EQ(m[2].transfers, std::vector<std::size_t>{3});
}

TEST(M2nSchedule, InPlaceFollowsThePlansShapesAtBothEnds) {
  const Plan plan = test_plan();
  const PlanIndex index(plan);
  const auto names = names_of(plan);
  // "big*" pieces are dim-0 rows of a dim-1 TP slice: back to back in neither the full tensor nor
  // the slice; "b*" (replicated, whole) are; both ends say the same.
  for (const auto& t : sends_of(plan, index, names, 0)) {
    const bool bias = names[t.param].rfind("b", 0) == 0 && names[t.param].rfind("big", 0) != 0;
    EXPECT_EQ(t.in_place, bias) << names[t.param];
  }
  for (const auto& t : receives_of(plan, index, names, 0)) {
    const bool bias = names[t.param].rfind("b", 0) == 0 && names[t.param].rfind("big", 0) != 0;
    EXPECT_EQ(t.in_place, bias) << names[t.param];
  }
}

}  // namespace
}  // namespace wt::m2n
