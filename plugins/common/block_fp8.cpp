#include "block_fp8.hpp"

#include <wt/sdk/errors.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace wt::plugins::fp8 {
namespace {

constexpr float kMinScale = 0x1p-126f;  // the least normal fp32
constexpr float kMaxScale = 0x1p127f;

float bf16_value(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// Both paths computed, one kept, in signed integers (|x|'s bits order as |x| does): no branch in
// the loop, which the compiler then vectorises.
inline uint8_t encode(float x) {
  const auto bits = std::bit_cast<int32_t>(x);
  const int32_t sign = (bits >> 24) & 0x80;
  int32_t abits = bits & 0x7FFFFFFF;
  abits = abits > 0x43E00000 ? 0x43E00000 : abits;  // saturation at 448.0f
  const float a = std::bit_cast<float>(abits);
  // Below 2^-6 (0x3C800000), the least normal: multiples of 2^-9. a * 512 is exact, and adding
  // 2^23 rounds it to an integer, ties to even, held in the sum's low mantissa bits (8 is 2^-6
  // itself, whose code is 8 too).
  const int32_t subnormal = std::bit_cast<int32_t>(a * 512.0f + 8388608.0f) - 0x4B000000;
  // Normal: fp32's 23 mantissa bits rounded to 3, ties to even, the exponent rebiased (127 -> 7).
  const int32_t rounded = abits + 0x7FFFF + ((abits >> 20) & 1);
  const int32_t normal = (rounded >> 20) - (120 << 3);
  return static_cast<uint8_t>(sign | (abits < 0x3C800000 ? subnormal : normal));
}

[[noreturn]] void refuse_element(const Bf16Matrix& in, int64_t r0, int64_t c0, int64_t nr,
                                 int64_t nc, const std::string& name) {
  for (int64_t r = r0; r < r0 + nr; ++r)
    for (int64_t c = c0; c < c0 + nc; ++c) {
      const uint16_t h = in.src[r * in.src_stride + c];
      if ((h & 0x7FFF) >= 0x7F80)
        sdk::fail(WT_ERR_INVALID_ARGUMENT,
                  "cannot send tensor '{}' as block FP8: element [{}, {}] is {}; no scale can "
                  "carry it",
                  name, r + in.row_origin, c + in.col_origin,
                  (h & 0x7F) != 0 ? "NaN"
                  : (h & 0x8000)  ? "-infinity"
                                  : "infinity");
    }
  sdk::fail(WT_ERR_INTERNAL, "tensor '{}': a block held a NaN that is no longer there", name);
}

// Calls f(block index among the touched, r0, nr, c0, nc) for each touched block, with the part of
// it the matrix holds in the matrix's own coordinates.
template <typename F>
void for_each_block(const Bf16Matrix& in, F&& f) {
  const BlockSpan span = blocks_touched(in);
  for (int64_t br = 0; br < span.rows; ++br) {
    const int64_t top = (span.first_row + br) * kBlock - in.row_origin;
    const int64_t r0 = std::max<int64_t>(top, 0), r1 = std::min(top + kBlock, in.rows);
    for (int64_t bc = 0; bc < span.cols; ++bc) {
      const int64_t left = (span.first_col + bc) * kBlock - in.col_origin;
      const int64_t c0 = std::max<int64_t>(left, 0), c1 = std::min(left + kBlock, in.cols);
      f(br * span.cols + bc, r0, r1 - r0, c0, c1 - c0);
    }
  }
}

// |x| orders as its bits do: the block's maximum in integers, NaN and infinities included (0x7F80
// and up), read once.
uint16_t part_amax(const Bf16Matrix& in, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  uint16_t amax_bits = 0;
  for (int64_t r = r0; r < r0 + nr; ++r) {
    const uint16_t* row = in.src + r * in.src_stride + c0;
    for (int64_t c = 0; c < nc; ++c)
      amax_bits = std::max<uint16_t>(amax_bits, static_cast<uint16_t>(row[c] & 0x7FFF));
  }
  return amax_bits;
}

void quantize_part(const Bf16Matrix& in, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                   float scale, uint8_t* out) {
  for (int64_t r = r0; r < r0 + nr; ++r) {
    const uint16_t* row = in.src + r * in.src_stride + c0;
    uint8_t* q = out + r * in.cols + c0;
    for (int64_t c = 0; c < nc; ++c) q[c] = encode(bf16_value(row[c]) / scale);
  }
}

}  // namespace

uint8_t to_e4m3(float x) {
  return encode(x);
}

float from_e4m3(uint8_t b) {
  const float sign = (b & 0x80) != 0 ? -1.0f : 1.0f;
  const int e = (b >> 3) & 0xF, m = b & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
}

float block_scale_inv(float amax, ScaleFormat format) {
  const float s = amax / kMax;
  if (s <= kMinScale) return kMinScale;
  if (format == ScaleFormat::kFp32) return s;
  int e = 0;
  const float m = std::frexp(s, &e);  // s = m * 2^e, m in [0.5, 1)
  return std::min(m == 0.5f ? s : std::ldexp(1.0f, e), kMaxScale);
}

BlockSpan blocks_touched(const Bf16Matrix& in) {
  BlockSpan s;
  s.first_row = in.row_origin / kBlock;
  s.rows = in.rows == 0 ? 0 : (in.row_origin + in.rows + kBlock - 1) / kBlock - s.first_row;
  s.first_col = in.col_origin / kBlock;
  s.cols = in.cols == 0 ? 0 : (in.col_origin + in.cols + kBlock - 1) / kBlock - s.first_col;
  return s;
}

void block_amax(const Bf16Matrix& in, uint16_t* amax, const std::string& name) {
  for_each_block(in, [&](int64_t b, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    const uint16_t m = part_amax(in, r0, nr, c0, nc);
    if (m >= 0x7F80) refuse_element(in, r0, c0, nr, nc, name);
    amax[b] = m;
  });
}

float scale_of_amax(uint16_t amax, ScaleFormat format) {
  return block_scale_inv(bf16_value(amax), format);
}

void quantize_with_scales(const Bf16Matrix& in, const float* scale_inv, uint8_t* q) {
  for_each_block(in, [&](int64_t b, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    quantize_part(in, r0, nr, c0, nc, scale_inv[b], q);
  });
}

void quantize_bf16(const Bf16Matrix& in, const Fp8Matrix& out, ScaleFormat format,
                   const std::string& name) {
  // Block by block, each read twice while it is in cache: its maximum, then its values.
  for_each_block(in, [&](int64_t b, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    const uint16_t m = part_amax(in, r0, nr, c0, nc);
    if (m >= 0x7F80) refuse_element(in, r0, c0, nr, nc, name);
    const float scale = scale_of_amax(m, format);
    out.scale_inv[b] = scale;
    quantize_part(in, r0, nr, c0, nc, scale, out.q);
  });
}

}  // namespace wt::plugins::fp8
