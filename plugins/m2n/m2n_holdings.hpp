// From what every trainer rank's source declares (gathered over the trainer group at
// trainer_init) to the Layout the plan is computed from: the same parameters on every rank (names,
// order, dtypes, full shapes), each rank holding the whole tensor or a slice of it, grouped as
// the plan wants them (same dtype, shape, holdings and TP rule: planned once).
#pragma once

#include "m2n_init_info.hpp"
#include "m2n_layout.hpp"

#include <wt/tensor.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace wt::m2n {

// What this rank holds, for the gather: [[name, dtype, shape, dim, lo, hi], ...].
nlohmann::json holdings_json(const std::vector<ParamMeta>& meta);
// Reads one rank's holdings back; errors name `rank`.
std::vector<ParamMeta> holdings_from_json(const nlohmann::json& j, int rank);

// Throws sdk::Error (WT_ERR_INVALID_ARGUMENT) naming the first rank and parameter that disagree
// with rank 0, a TP rule whose dimension a parameter does not have.
Layout layout_from_holdings(const std::vector<std::vector<ParamMeta>>& per_rank,
                            const InferenceLayout& inference, const std::vector<TpRule>& rules);

}  // namespace wt::m2n
