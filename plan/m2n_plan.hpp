// The m2n plan: which trainer rank sends which piece of which parameter to which worker rank,
// computed once from a Layout. Every element a worker rank needs is assigned to exactly one
// trainer rank that holds it; where several hold it (replicated weights), the senders rotate over
// the holders, so within a piece their counts differ by at most one, and the run of holders that
// send one more starts at the least loaded (a heuristic across groups, not an optimum).
// Deterministic: the same layout gives the same plan, byte for byte, on every rank.
//
// A piece is a box (per dimension [lo, hi)) of one parameter, the same for every member of its
// group and every replica; its holders are the ranks that hold all of it. For member m of the
// group and replica r, the sender is holders[(first + m * replicas + r) % holders.size()].
#pragma once

#include "m2n_layout.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace wt::m2n {

struct Box {
  std::vector<int64_t> lo, hi;  // per dimension
  bool operator==(const Box&) const = default;
};

struct Piece {
  int tp_rank = 0;
  Box box;
  std::vector<int> holders;  // ascending
  int64_t first = 0;         // rotation start, in [0, holders.size())
  bool operator==(const Piece&) const = default;
};

struct GroupPlan {
  std::vector<std::string> names;
  DLDataType dtype{};
  std::vector<int64_t> shape;
  int tp_dim = -1;
  std::vector<Piece> pieces;  // by tp rank, then along the box
};

struct Plan {
  int trainer_ranks = 1;
  InferenceLayout inference;
  std::vector<GroupPlan> groups;

  // The rank that sends `piece` of member `member` to replica `replica`.
  static int sender(const Piece& piece, std::size_t member, int replicas, int replica);
};

// Throws sdk::Error (WT_ERR_INVALID_ARGUMENT) for a layout it cannot plan: a parameter (or a
// range of one) no trainer rank holds, holdings that slice one parameter along two dimensions, a
// shape tensor parallelism does not divide.
Plan compute_plan(const Layout& layout);

// What a worker rank needs of a group's parameters under tensor parallelism: the box of tp rank t.
Box needed_box(const std::vector<int64_t>& shape, int tp_dim, int tensor_parallel, int tp_rank);

// Bytes a piece moves per member and replica.
uint64_t piece_bytes(const Piece& p, DLDataType dtype);

struct PlanStats {
  std::vector<uint64_t> trainer_bytes;  // sent per trainer rank per round
  std::vector<uint64_t> worker_bytes;   // received per worker rank per round
  uint64_t model_bytes = 0;             // one copy of every parameter
  uint64_t pieces = 0;                  // point-to-point sends per round (all members, replicas)
};
// Whether block FP8 sends parameter `name` (block_fp8_layout.hpp): a bfloat16 weight of two or
// more dimensions, except those FP8 checkpoints keep in high precision, by name: embeddings
// (*embed*), the LM head (*lm_head*), norms (*norm*) and MoE routers (*.gate.weight, *router*).
bool sent_as_fp8(const std::string& name, const std::vector<int64_t>& shape, DLDataType dtype);

PlanStats plan_stats(const Plan& plan);

// The plan as plain JSON for the worker init info, and back. from_json checks its form, that the
// pieces of every group and tp rank cover the needed box exactly once (a parameter no piece
// covers, or one covered twice, is refused naming it), and that every holder is a trainer rank;
// `what` names the document in errors.
nlohmann::json plan_to_json(const Plan& plan);
Plan plan_from_json(const nlohmann::json& j, const std::string& what);
// XXH3-64 of the plan's canonical JSON text, as 16 hex digits.
std::string plan_digest(const Plan& plan);

// What a worker rank holds, to check the plan against before the first round.
struct WorkerParam {
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> local_shape;  // its tensor-parallel slice
  int tp_dim = -1;                   // the dimension TP splits (planned_params), -1: whole
};
// Refuses (WT_ERR_INVALID_ARGUMENT) naming the first disagreement: a planned parameter the
// worker lacks, or holds with another dtype or local shape, or a worker parameter the plan does
// not cover.
void check_worker(const Plan& plan, int worker_rank, const std::vector<WorkerParam>& params);
// What tensor-parallel rank `tp_rank` holds of every planned parameter, in the plan's order.
std::vector<WorkerParam> planned_params(const Plan& plan, int tp_rank);
// check_worker's test against any list of what the worker must hold (engine_layout.hpp's too).
void check_held_params(const std::vector<WorkerParam>& expected,
                       const std::vector<WorkerParam>& params, int worker_rank, int tp_rank);

}  // namespace wt::m2n
