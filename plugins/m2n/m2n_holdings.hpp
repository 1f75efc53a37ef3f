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

// What trainer rank `rank` of `ranks` declares at init, for the gather, in a few hundred bytes
// however large the model (every rank receives every rank's):
//   {"model": <32 hex>, "count": N, "blocks": [<32 hex>, ...],
//    "runs": [[n, code], ...], "slices": [[dim, lo, hi], ...]}
// "model" digests the parameters' names, dtypes and full shapes in order (XXH3-128), "blocks" the
// same per kDeclarationBlock parameters (so that a disagreement is named); "runs" say, in order,
// what the rank holds of n parameters at a time: code -1 the whole tensor, d >= 0 the even split
// of dimension d among the ranks as FSDP makes it (chunks of ceil(size / ranks); the last ranks may
// hold less, or nothing), -2 the next n entries of "slices".
inline constexpr std::size_t kDeclarationBlock = 4096;
nlohmann::json holdings_declaration(const std::vector<ParamMeta>& meta, int rank, int ranks);
// What one trainer rank holds of each parameter of the model, as it declared it: runs over the
// parameters in order, so that 256 ranks' holdings of a 70,000-tensor model take kilobytes.
class RankHoldings {
 public:
  struct Slice {
    int dim = -1;  // -1: the whole tensor
    int64_t lo = 0, hi = 0;
  };
  // Rank `rank`'s holdings from its declaration `j`, checked against this rank's own metadata
  // `own` (the model every rank must declare alike). Errors (WT_ERR_INVALID_ARGUMENT) name
  // `rank`, and where its model differs from this rank's, the parameters of the first block that
  // differs.
  static RankHoldings from_declaration(const nlohmann::json& j, int rank, int ranks,
                                       const std::vector<ParamMeta>& own);
  int rank() const { return rank_; }

  // Walks the parameters in order: next(m) is what the rank holds of parameter m, the next one.
  class Cursor {
   public:
    explicit Cursor(const RankHoldings& h) : h_(h) {}
    Slice next(const ParamMeta& m);

   private:
    const RankHoldings& h_;
    std::size_t run_ = 0, in_run_ = 0, slice_ = 0;
  };
  // Every parameter of `model` as this rank holds it.
  std::vector<ParamMeta> expand(const std::vector<ParamMeta>& model) const;

 private:
  int rank_ = 0, ranks_ = 1;
  std::vector<std::pair<std::size_t, int>> runs_;  // (parameters, code) as declared
  std::vector<Slice> slices_;                      // code -2's, in order
};

// The Layout of `model` (every rank's names, dtypes and shapes) held as `per_rank` says (one per
// trainer rank, in rank order). Throws sdk::Error (WT_ERR_INVALID_ARGUMENT) for a parameter
// declared twice, a TP rule whose dimension a parameter does not have.
Layout layout_from_holdings(const std::vector<ParamMeta>& model,
                            const std::vector<RankHoldings>& per_rank,
                            const InferenceLayout& inference, const std::vector<TpRule>& rules);

}  // namespace wt::m2n
