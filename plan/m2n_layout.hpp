// What the m2n plan is computed from: the parameters, what each trainer rank holds of each, and
// what each inference (worker) rank needs. A layout file states these as rules (`wt plan`); the
// m2n backend will build the same structures from its trainer ranks' sources and its init info.
//
// Shapes and slices are in elements. A slice is [lo, hi) along one dimension; a trainer rank
// holds a parameter whole, or one slice of it, or nothing.
#pragma once

#include <wt/requires_cxx20.hpp>

#include "engine_rules.hpp"

#include <dlpack/dlpack.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace wt::m2n {

// What one trainer rank holds of a parameter: dim -1 is the whole tensor.
struct Held {
  int rank = 0;
  int dim = -1;
  int64_t lo = 0, hi = 0;  // along dim (unused when whole)
};

// Parameters that share dtype, shape, holdings and tensor-parallel rule: planned once, sent as
// many times as the group has members. A layout of a 1 T-parameter MoE has a few dozen groups.
struct ParamGroup {
  std::vector<std::string> names;
  DLDataType dtype{};
  std::vector<int64_t> shape;
  // Shared by the groups a holding rule makes; every rank that holds anything is listed.
  std::shared_ptr<const std::vector<Held>> holdings;
  int tp_dim = -1;  // the dimension tensor parallelism splits (-1: every TP rank needs it whole)
};

// R replicas of T tensor-parallel ranks; worker rank w = replica * T + tp rank.
struct InferenceLayout {
  int replicas = 1;
  int tensor_parallel = 1;
  int worker_ranks() const { return replicas * tensor_parallel; }
};

struct Layout {
  std::vector<ParamGroup> groups;
  int trainer_ranks = 1;
  InferenceLayout inference;
  std::vector<EngineRule> engine;  // the engine's own parameters (engine_layout.hpp); none: as sent
};

// A layout file (JSON):
//   {"parameters": [{"name": "layers.{}.mlp.w1.weight", "ranges": [[0, 61]],
//                    "dtype": "bfloat16", "shape": [2048, 7168]}, ...],
//    "trainer": {"ranks": 256, "holdings": [{"match": "*", "shard_dim": 0}]},
//    "inference": {"replicas": 16, "tensor_parallel": 8,
//                  "rules": [{"match": "*.w2.weight", "dim": 1}, {"match": "*", "dim": -1}]},
//    "engine": [{"fuse": "*.w13.weight", "parts": ["*.w1.weight", "*.w3.weight"]}]}
// A name's "{}" take the ranges' values in turn (one range per "{}", [first, last+1)). Holdings:
// the first rule whose glob matches a name decides — "shard_dim": d splits dimension d over the
// ranks in chunks of ceil(size / ranks), as FSDP does (the last ranks may hold less, or nothing);
// "replicated": true gives every rank the whole tensor. Inference rules: the first match gives the
// dimension TP splits (it must divide by tensor_parallel); no match, or -1: needed whole.
// "engine" (optional): the inference engine's parameters composed from these (engine_layout.hpp).
// Throws sdk::Error (WT_ERR_INVALID_ARGUMENT) naming the entry or field that is wrong.
Layout layout_from_json(const nlohmann::json& j, const std::string& what);

// Glob match with '*' (any run) and '?' (one character), as fnmatch without flags. At most
// |pattern| * (|text| + 1) steps, added to *steps when given.
bool glob_match(std::string_view pattern, std::string_view text, uint64_t* steps = nullptr);

}  // namespace wt::m2n
