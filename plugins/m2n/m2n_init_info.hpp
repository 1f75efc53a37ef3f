// The m2n trainer init info:
//   master_address, master_port  the rendezvous trainer rank 0 hosts (every trainer rank and
//                                every worker rank meet there)
//   world_size                   1 + the worker ranks (vLLM's count: one trainer + the workers)
//   rank                         this trainer rank (its rank in the trainer group)
//   device                       "cpu" (host memory over Gloo pairs; master_address/port needed)
//                                or "cuda:N" (CUDA memory over NCCL send/recv; rank 0 mints the
//                                NCCL unique id, no address needed)
//   tensor_parallel              int, default 1: the worker ranks form replicas of this many TP
//                                ranks (worker rank = replica * T + tp rank)
//   tp_rules                     [{match: glob, dim: d}], default none: the first rule whose glob
//                                matches a name gives the dimension TP splits (-1 or no match:
//                                every TP rank needs it whole)
//   engine_layout                [rules], default none: the engine's own parameters composed from
//                                the trainer's (fused projections, stacked experts, tied names;
//                                plan/engine_layout.hpp), checked here and at every worker
//   wire_dtype                   "as-held" (default) or "float8_e4m3fn": block FP8 on the wire for
//                                the weights an FP8 engine stores so (plan/block_fp8_layout.hpp)
//   fp8_scales                   "fp32" (default) or "ue8m0": the block scales' form
//   rendezvous_timeout_s, transfer_timeout_s  the deadlines (60, 300): forming, and a round
//   stall_timeout_s              int, default 60: host memory, a round in which no byte moved on
//                                the pair a rank waits on for this long fails

// Trainer rank 0 ships the worker init info: the rendezvous, the session secret, the plan as
// JSON and its digest (docs/m2n.md).
#pragma once

#include "../common/domain_init_info.hpp"
#include "engine_rules.hpp"

#include <wt/sdk/errors.hpp>

#include <string>
#include <utility>
#include <vector>

namespace wt::m2n {

struct TpRule {
  std::string match;
  int dim = -1;
};

struct M2nInitInfo final : plugins::DomainInitInfo {
  int64_t tensor_parallel = 1;
  std::vector<TpRule> tp_rules;
  std::vector<EngineRule> engine_rules;
  bool block_fp8 = false;  // wire_dtype: float8_e4m3fn
  bool ue8m0 = false;      // fp8_scales: ue8m0

  int64_t worker_ranks() const { return rendezvous.world_size - 1; }

  nlohmann::json to_json() const override {
    auto j = domain_json();
    j["tensor_parallel"] = tensor_parallel;
    auto rules = nlohmann::json::array();
    for (const auto& r : tp_rules) rules.push_back({{"match", r.match}, {"dim", r.dim}});
    j["tp_rules"] = std::move(rules);
    if (!engine_rules.empty()) j["engine_layout"] = engine_rules_to_json(engine_rules);
    if (block_fp8) j["wire_dtype"] = "float8_e4m3fn";
    if (ue8m0) j["fp8_scales"] = "ue8m0";
    return j;
  }

  static std::unique_ptr<sdk::InitInfoBase> parse(const nlohmann::json& fields) {
    sdk::FieldReader r(fields, "init_info for backend 'm2n'");
    auto info = std::make_unique<M2nInitInfo>();
    info->read_domain(r);
    info->tensor_parallel = r.opt_int("tensor_parallel", 1);
    if (r.has("tp_rules")) {
      const auto& rules = r.raw("tp_rules");
      if (!rules.is_array())
        sdk::fail_field("tp_rules", WT_ERR_INVALID_ARGUMENT,
                        "invalid {}: field 'tp_rules' must be a list of {{match, dim}}", r.what());
      for (std::size_t i = 0; i < rules.size(); ++i) {
        sdk::FieldReader rule(rules[i], fmt::format("{}, tp_rules[{}]", r.what(), i));
        std::string match = rule.get_string("match");
        const int64_t dim = rule.get_int("dim");
        rule.finish();
        TpRule t{std::move(match), static_cast<int>(dim)};
        if (dim < -1 || dim > 7)
          sdk::fail_field("tp_rules", WT_ERR_INVALID_ARGUMENT,
                          "invalid {}: tp_rules[{}].dim must be -1 (whole) or a dimension 0..7",
                          r.what(), i);
        info->tp_rules.push_back(std::move(t));
      }
    }
    if (r.has("engine_layout")) {
      try {
        info->engine_rules =
            engine_rules_from_json(r.raw("engine_layout"), r.what() + ", engine_layout");
      } catch (const sdk::Error& e) {
        sdk::fail_field("engine_layout", e.code(), "{}", e.what());
      }
    }
    const std::string wire = r.has("wire_dtype") ? r.get_string("wire_dtype") : "as-held";
    if (wire != "as-held" && wire != "float8_e4m3fn")
      sdk::fail_field("wire_dtype", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'wire_dtype' must be \"as-held\" or \"float8_e4m3fn\", "
                      "got \"{}\"",
                      r.what(), wire);
    info->block_fp8 = wire == "float8_e4m3fn";
    const std::string scales = r.has("fp8_scales") ? r.get_string("fp8_scales") : "fp32";
    if (scales != "fp32" && scales != "ue8m0")
      sdk::fail_field("fp8_scales", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'fp8_scales' must be \"fp32\" or \"ue8m0\", got \"{}\"",
                      r.what(), scales);
    info->ue8m0 = scales == "ue8m0";
    if (info->ue8m0 && !info->block_fp8)
      sdk::fail_field("fp8_scales", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'fp8_scales' is for block FP8; it means nothing with "
                      "wire_dtype \"{}\"",
                      r.what(), wire);
    r.finish();
    if (info->tensor_parallel < 1 || info->tensor_parallel > 1024)
      sdk::fail_field("tensor_parallel", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'tensor_parallel' must be in 1..1024", r.what());
    if (info->worker_ranks() % info->tensor_parallel != 0)
      sdk::fail_field("tensor_parallel", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: {} worker rank(s) (world_size {} - 1) do not form replicas of "
                      "tensor_parallel {}",
                      r.what(), info->worker_ranks(), info->rendezvous.world_size,
                      info->tensor_parallel);
    info->check_deadlines(r);
    return info;
  }
};

}  // namespace wt::m2n
