// A trainer rank's block-FP8 side of a round (the init info's `wire_dtype: float8_e4m3fn`): which
// of its weights go on the wire as block FP8 (plan/block_fp8_layout.hpp decides), and, each
// round, their FP8 values and scales in buffers of its own, which the round table then sends as
// it sends any tensor.
//
// A weight's 128 x 128 blocks start at its first element, so an FSDP shard whose rows (or
// columns) do not start or end on a block boundary shares blocks with the ranks beside it. Before
// it quantizes, each rank sends every rank it shares blocks with its maxima of those blocks (2
// bytes a block: a BF16's bits) over their pair, and takes the largest of its own and theirs:
// every rank that holds part of a block quantizes it with the same scale, the whole block's, and
// the values and scales that arrive are the whole weight's quantization, bit for bit
// (plugins/common/block_fp8.hpp). A NaN or infinity is refused at the rank that holds it, naming
// the weight and the element.
#pragma once

#include "../common/block_fp8.hpp"
#include "m2n_holdings.hpp"
#include "transfers.hpp"

#include <wt/sdk/abortable_wait.hpp>
#include <wt/tensor.hpp>

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

namespace wt::m2n {

class Fp8Sender {
 public:
  // `meta`: this rank's parameters as declared (its slices); `fp8`: the names the plan sends as
  // block FP8; `per_rank`: every trainer rank's holdings, for the blocks this rank shares. Refuses
  // (WT_ERR_INVALID_ARGUMENT) a block-FP8 weight that is not bfloat16, or whose blocks some rank's
  // slice cuts while another rank holds it whole or sliced along another dimension (their maxima
  // could not be combined).
  Fp8Sender(const std::vector<ParamMeta>& meta, const std::unordered_set<std::string>& fp8,
            const std::vector<RankHoldings>& per_rank, int rank, plugins::fp8::ScaleFormat format);

  // The round's parameters as the plan names them: each block-FP8 weight as its values and, next,
  // its scales (`<name>_scale_inv`), the others as declared.
  const std::vector<ParamMeta>& wire_meta() const { return wire_meta_; }
  bool any() const { return !weights_.empty(); }

  // Quantizes the round's block-FP8 weights from `source` (one tensor per declared parameter, in
  // order; each FP8 one in host memory, its rows' elements back to back), exchanging maxima with
  // the ranks that share blocks over `transfers` (mesh ranks = trainer ranks; slot(round, 1)), on
  // `threads` threads. Returns the round's wire tensors, in wire_meta()'s order.
  const std::vector<wt_tensor>& prepare(const std::vector<wt_tensor>& source, Transfers& transfers,
                                        uint32_t round, unsigned threads,
                                        const sdk::AbortSignal& aborted);

  // Bytes of the FP8 values and scales this rank keeps between rounds.
  uint64_t buffer_bytes() const;

 private:
  struct Shared {  // the blocks of one weight this rank shares with one other rank
    std::size_t weight = 0;
    int64_t lo = 0, hi = 0;  // block indices along the sliced dimension
  };
  struct Peer {
    int rank = 0;
    std::vector<Shared> shared;
    std::vector<uint16_t> out, in;  // the maxima sent and received, in `shared` order
    std::string what_out, what_in;
  };
  struct Weight {
    std::size_t param = 0;       // its place among the declared parameters
    std::size_t wire = 0;        // its values' place among the wire parameters (scales: next)
    int dim = -1;                // the blocked dimension this rank's slice cuts (0: rows, 1: cols)
    int64_t origin = 0;          // where the slice starts along it
    int64_t matrices = 1;        // the product of the dimensions before the last two
    int64_t leading_origin = 0;  // where the slice starts along a leading dimension it cuts
    int64_t rows = 0, cols = 0;  // of each matrix this rank holds
    plugins::fp8::BlockSpan span;
    std::vector<uint16_t> amax;  // per matrix, per touched block
    std::vector<float> scales;
    std::vector<uint8_t> values;
    std::vector<int64_t> value_shape, scale_shape;  // what this rank holds of each
  };
  // Matrix m (counted over the leading dimensions) of the weight's source tensor `t`.
  static plugins::fp8::Bf16Matrix matrix(const Weight& w, const DLTensor& t, int64_t m);
  // The weight's name for errors about matrix m: "w" for a matrix, "w[e]" past two dimensions.
  std::string name_of(const Weight& w, int64_t m) const;
  // Packs this rank's maxima of the shared blocks (or takes the largest with a peer's).
  void exchange_maxima(Peer& peer, bool take);
  void add_shared(const std::vector<ParamMeta>& meta, const std::vector<RankHoldings>& per_rank,
                  int rank);

  std::vector<ParamMeta> wire_meta_;
  std::vector<std::size_t> wire_of_;  // per declared parameter: its (values') wire index
  std::vector<Weight> weights_;
  std::vector<Peer> peers_;
  std::vector<wt_tensor> wire_;
  plugins::fp8::ScaleFormat format_;
};

}  // namespace wt::m2n
