// Block FP8: what an FP8 inference engine stores for a weight, made by the sender from its BF16
// (compiled into each plugin that sends it: plugins/common).
//
// The format, as DeepSeek-V3-style checkpoints and vLLM's block-FP8 linear layers hold it: a 2-D
// weight [N, K] as `float8_e4m3fn` (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no
// infinities; max finite ±448; NaN is S.1111.111), cut into 128 × 128 blocks (the last row and
// column of blocks may be smaller), with one fp32 scale per block, `weight_scale_inv`, of shape
// [ceil(N/128), ceil(K/128)]: the value to multiply the FP8 by.
//
// The rule, exactly (what a test compares with an independent quantizer, bit for bit):
//   amax      = the largest |x| of the block (exact: a BF16 widens to fp32 without rounding)
//   scale_inv = max(fl32(amax / 448), 2^-126)        (fp32 division, round to nearest even; the
//               floor keeps the scale of an all-zero or tiny block a normal, nonzero fp32)
//   UE8M0:    scale_inv = the least power of two >= amax / 448, in 2^-126..2^127 (an 8-bit
//             exponent alone), for engines that read scales that way
//   q         = e4m3(fl32(x / scale_inv)): round to nearest, ties to even, saturating at ±448
//               (a value past ±448 becomes ±448, never NaN); -0 stays -0.
// A NaN or an infinity in a block is refused, naming the tensor and the element: no scale can
// carry it, and an engine would serve it silently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace wt::plugins::fp8 {

inline constexpr int64_t kBlock = 128;
inline constexpr float kMax = 448.0f;

enum class ScaleFormat {
  kFp32,   // amax / 448
  kUe8m0,  // a power of two, the least one >= amax / 448
};

// One e4m3 byte for x (finite), by the rule above.
uint8_t to_e4m3(float x);
// The value of an e4m3 byte (NaN for S.1111.111).
float from_e4m3(uint8_t b);

// The scale of a block whose largest |x| is `amax`, by the rule above.
float block_scale_inv(float amax, ScaleFormat format);

// Where a BF16 matrix is and where its FP8 and scales go. `src` is row-major with `src_stride`
// elements between rows (a row slice of a larger tensor); `q` is dense [rows, cols] and
// `scale_inv` dense [ceil(rows/128), ceil(cols/128)].
//
// A matrix may be a shard of a weight that starts inside the weight's block grid: `row_origin`
// and `col_origin` are where its element [0, 0] lies in the weight (the grid's blocks start at the
// weight's [0, 0]). Errors name elements in the weight's coordinates.
struct Bf16Matrix {
  const uint16_t* src = nullptr;
  int64_t rows = 0, cols = 0, src_stride = 0;
  int64_t row_origin = 0, col_origin = 0;
};
struct Fp8Matrix {
  uint8_t* q = nullptr;
  float* scale_inv = nullptr;
};

// Quantizes `in` into `out` block by block. Throws sdk::Error (WT_ERR_INVALID_ARGUMENT) naming
// `name` and the element when a value is NaN or infinite; nothing of a refused block is written.
void quantize_bf16(const Bf16Matrix& in, const Fp8Matrix& out, ScaleFormat format,
                   const std::string& name);

// A shard that cuts blocks with other ranks' shards (FSDP rows not on a 128 boundary) cannot find
// those blocks' scales alone: each rank takes the maxima of what it holds of every block it
// touches, the ranks that share a block combine theirs (the largest), and each quantizes its
// elements with the scales of the combined maxima. The result is the whole weight's quantization,
// bit for bit.
//
// The blocks a shard touches: block rows [row_origin / 128, ceil((row_origin + rows) / 128)), block
// columns alike; `amax` and `scale_inv` below list them row-major.
struct BlockSpan {
  int64_t first_row = 0, rows = 0, first_col = 0, cols = 0;
  int64_t count() const { return rows * cols; }
};
BlockSpan blocks_touched(const Bf16Matrix& in);
// Per touched block, the largest |x| the shard holds of it, as BF16 bits (|x| orders as its bits
// do; combine shards' maxima with std::max). Refuses a NaN or infinity as quantize_bf16 does.
void block_amax(const Bf16Matrix& in, uint16_t* amax, const std::string& name);
// The scale of a block from its combined maximum (BF16 bits).
float scale_of_amax(uint16_t amax, ScaleFormat format);
// Quantizes the shard's elements into `q` (dense [rows, cols]) with one scale per touched block.
void quantize_with_scales(const Bf16Matrix& in, const float* scale_inv, uint8_t* q);

// The bytes block FP8 takes for a [rows, cols] weight: the FP8 values and the fp32 scales.
inline uint64_t bytes_of(int64_t rows, int64_t cols) {
  const auto blocks = static_cast<uint64_t>((rows + kBlock - 1) / kBlock) *
                      static_cast<uint64_t>((cols + kBlock - 1) / kBlock);
  return static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) + 4 * blocks;
}

}  // namespace wt::plugins::fp8
