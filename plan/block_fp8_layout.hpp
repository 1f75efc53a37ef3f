// Block FP8 on the wire, as the plan sees it. Each weight an FP8 engine stores as block FP8
// (sent_as_fp8, and its tensor-parallel slices whole blocks) becomes two parameters the plan
// moves like any other:
//   - the weight as float8_e4m3fn: 1 byte an element, the same shape, holdings and TP rule;
//   - its scales, `<name>_scale_inv`: fp32, one per 128 x 128 block of the last two dimensions
//     ([..., ceil(R/128), ceil(C/128)]), split by TP along the same dimension. A trainer rank
//     holds the scale of every block it holds an element of: a block that two ranks' shards cut
//     is held by both, which agree on its scale from their partial maxima before they quantize.
// The block grid starts at the full tensor's first element, so a TP rank's blocks are the full
// tensor's: a weight whose TP slices would cut blocks (a slice extent not a multiple of 128) is
// sent as held instead, as an engine keeps such a layer unquantized (vLLM refuses block FP8 for
// it). plugins/common/block_fp8.hpp has the format and the rounding.
#pragma once

#include "m2n_layout.hpp"

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

namespace wt::m2n {

inline constexpr int64_t kFp8Block = 128;

// The scales' name for a weight's: "w.weight" -> "w.weight_scale_inv" (vLLM's block-FP8 naming).
std::string scale_name_of(const std::string& weight);

struct Fp8Selection {
  std::unordered_set<std::string> names;  // the weights sent as block FP8
  std::size_t weights = 0;                // sent as block FP8
  std::size_t kept_tp = 0;                // FP8 by name, kept as held: TP slices would cut blocks
  std::string first_kept_tp;              // one of them, to name
};

// Whether a weight goes on the wire as block FP8 under tensor parallelism `tensor_parallel` split
// along `tp_dim`: sent_as_fp8, and its TP slices whole blocks.
bool sent_as_block_fp8(const std::string& name, const std::vector<int64_t>& shape, DLDataType dtype,
                       int tp_dim, int tensor_parallel);

// The layout with block FP8 on the wire. Throws sdk::Error (WT_ERR_INVALID_ARGUMENT) where a
// scale's name is a parameter's already.
Layout block_fp8_layout(const Layout& layout, const std::string& what,
                        Fp8Selection* selection = nullptr);

}  // namespace wt::m2n
