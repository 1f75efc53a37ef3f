// Engine-format layouts: the inference engine's own parameters, composed from the trainer's, so
// that an engine holding fused projections and stacked experts (vLLM's QKVParallelLinear,
// MergedColumnParallelLinear, FusedMoE) receives straight into them, with no second copy of its
// model and no rename in its load path.
//
// Rules (a JSON list: the layout file's "engine", the m2n init info's "engine_layout"):
//   {"fuse": "*.qkv_proj.weight", "parts": ["*.q_proj.weight", "*.k_proj.weight",
//   "*.v_proj.weight"]}
//       the engine parameter is its parts concatenated along dimension 0, each part sliced by
//       tensor parallelism on its own first: a TP rank's qkv_proj is its slice of q, then of k,
//       then of v.
//   {"stack": "*.experts.w13_weight", "experts": 384,
//    "parts": ["*.experts.#.gate_proj.weight", "*.experts.#.up_proj.weight"]}
//       [experts, ...]: expert e's parts ('#' = e) fused as above, the experts stacked along a new
//       dimension 0 (every TP rank holds every expert, each sliced as its parts' TP rules say).
//   {"tie": "lm_head.weight", "to": "model.embed_tokens.weight"}
//       the engine holds parameter `to` under a second name too (a tied head): it is sent once,
//       and an engine that keeps the second name in memory of its own gets the same bytes.
// '*' stands for any text, the same in a rule's engine name and in its parts: every trainer
// parameter that matches a rule's first part (with '#' = 0) makes one engine parameter. Rules apply
// in order, and a rule's first part matches only parameters no earlier rule took; a trainer
// parameter is a part of at most one engine parameter, and one no rule takes is an engine
// parameter under its own name. Each part's TP slice lies back to back in the
// engine's slice (both compose along the leading dimension), so a part is received in place.
#pragma once

#include "engine_rules.hpp"
#include "m2n_plan.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace wt::m2n {

// The engine's parameters as one TP rank holds them (the same shapes on every TP rank: TP divides
// every dimension it splits), and where each trainer parameter's TP slice lands in them.
struct EngineTensor {
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> local_shape;
  int64_t tied_to = -1;  // a second name of tensor tied_to: no part of its own
};
struct EnginePlace {
  uint32_t tensor = 0;
  uint64_t element_offset = 0;  // where the slice's first element lies in the engine tensor
};
struct EngineLayout {
  std::vector<EngineTensor> tensors;  // in the order of their first part in the plan
  std::unordered_map<std::string, EnginePlace> places;  // every planned parameter
  std::size_t composed = 0;  // engine tensors made of more than one part, or renamed
  const EnginePlace& place_of(const std::string& trainer_name) const;
};

// Applies `rules` to the plan's parameters. No rules: every parameter under its own name.
// Refuses (WT_ERR_INVALID_ARGUMENT, naming the rule and the parameter) a part no trainer parameter
// is, a parameter two rules take, parts whose dtypes or TP slices do not compose (the same dtype,
// the same slice shape past dimension 0), an engine name that is also a trainer parameter's, and a
// tie to a parameter the plan does not send or from a name the trainer sends too.
EngineLayout compose_engine(const Plan& plan, const std::vector<EngineRule>& rules,
                            const std::string& what);
// The same from what one TP rank is sent of each parameter, in order (planned_params).
EngineLayout compose_engine(const std::vector<WorkerParam>& sent,
                            const std::vector<EngineRule>& rules, const std::string& what);

// What a worker rank must hold: the engine's parameters (the plan's own when there are no rules).
std::vector<WorkerParam> engine_params(const EngineLayout& engine);

}  // namespace wt::m2n
