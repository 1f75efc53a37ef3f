// Block FP8 (plugins/common/block_fp8.hpp) against an independent reference quantizer, bit for
// bit: the reference finds the nearest e4m3 value by searching a table of every value, decoded in
// double precision from the format's definition (no bit tricks), and takes the even code on a
// tie. Random values over the whole range, and the edges: zeros, subnormals, exact ties, ±448 and
// beyond, blocks cut by the matrix's edges, a row slice of a wider tensor, NaN and infinities.
#include "block_fp8.hpp"

#include <wt/sdk/errors.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

using ::testing::HasSubstr;

namespace wt::plugins::fp8 {
namespace {

// The value of a non-negative e4m3 code from the format's definition: exponent field e (bias 7),
// mantissa m (3 bits); e = 0 is subnormal, m / 8 * 2^-6.
double reference_value(int code) {
  const int e = code >> 3, m = code & 7;
  if (e == 0) return std::ldexp(m, -9);
  return std::ldexp(8 + m, e - 10);
}

uint8_t reference_e4m3(float x) {
  const double a = std::fabs(static_cast<double>(x));
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  int best = 0;
  if (a >= 448.0) {
    best = 126;  // saturation: S.1111.110 is 448
  } else {
    for (int c = 0; c <= 126; ++c) {
      const double d = std::fabs(reference_value(c) - a), bd = std::fabs(reference_value(best) - a);
      if (d < bd || (d == bd && (c & 1) == 0 && (best & 1) == 1)) best = c;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

// The scale by the written rule, the power of two found by doubling rather than by frexp.
float reference_scale(float amax, ScaleFormat format) {
  const float s = std::max(amax / 448.0f, 0x1p-126f);
  if (format == ScaleFormat::kFp32) return s;
  float p = 0x1p-126f;
  while (p < s && p < 0x1p127f) p *= 2.0f;
  return p;
}

uint16_t bf16_of(float f) {  // truncation: every test value is chosen as a BF16 already
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);
}
float value_of(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

TEST(BlockFp8, EveryFiniteCodeDecodesAndEncodesToItself) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(from_e4m3(static_cast<uint8_t>(b))));
      continue;
    }
    const float v = from_e4m3(static_cast<uint8_t>(b));
    EXPECT_EQ(static_cast<double>(std::fabs(v)), reference_value(b & 0x7F)) << b;
    EXPECT_EQ(to_e4m3(v), b) << b;
  }
  EXPECT_EQ(from_e4m3(0x7E), 448.0f);
  EXPECT_EQ(from_e4m3(0x01), 0x1p-9f);
  EXPECT_EQ(from_e4m3(0x08), 0x1p-6f);
}

TEST(BlockFp8, EncodingEqualsTheReferenceAtTheEdges) {
  std::vector<float> xs = {
      0.0f,       -0.0f,     448.0f,       -448.0f,  449.0f,
      464.0f,     480.0f,    1e30f,        -1e30f,   std::numeric_limits<float>::max(),
      0x1p-6f,    0x1p-10f,  3 * 0x1p-10f, 0x1p-11f, 0x1p-149f,
      -0x1p-149f, 0x1p-126f, 1.0f,         -1.0f};
  // Every midpoint between neighbouring codes (an exact tie) and the floats either side of it.
  for (int c = 0; c < 126; ++c) {
    const auto mid = static_cast<float>((reference_value(c) + reference_value(c + 1)) / 2);
    ASSERT_EQ(static_cast<double>(mid), (reference_value(c) + reference_value(c + 1)) / 2);
    for (float m : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)})
      xs.insert(xs.end(), {m, -m});
  }
  for (float x : xs) EXPECT_EQ(to_e4m3(x), reference_e4m3(x)) << x;
}

TEST(BlockFp8, EncodingEqualsTheReferenceOverRandomValues) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-12.0f, 10.0f);
  std::uniform_int_distribution<uint32_t> bits;
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    float x = std::exp2(exponent(rng)) * ((i & 1) != 0 ? -1.0f : 1.0f);
    if (i % 4 == 3) {  // any finite float
      x = std::bit_cast<float>(bits(rng));
      if (!std::isfinite(x)) continue;
    }
    ASSERT_EQ(to_e4m3(x), reference_e4m3(x)) << x;
    ++checked;
  }
  EXPECT_GT(checked, 190000);
}

struct Quantized {
  std::vector<uint8_t> q;
  std::vector<float> scales;
};

Quantized quantize(const std::vector<uint16_t>& src, int64_t rows, int64_t cols, int64_t stride,
                   ScaleFormat format) {
  const int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
  Quantized out{std::vector<uint8_t>(static_cast<std::size_t>(rows * cols), 0xAA),
                std::vector<float>(static_cast<std::size_t>(br * bc), -1.0f)};
  quantize_bf16({src.data(), rows, cols, stride}, {out.q.data(), out.scales.data()}, format, "w");
  return out;
}

Quantized reference_quantize(const std::vector<uint16_t>& src, int64_t rows, int64_t cols,
                             int64_t stride, ScaleFormat format) {
  const int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
  Quantized out{std::vector<uint8_t>(static_cast<std::size_t>(rows * cols)),
                std::vector<float>(static_cast<std::size_t>(br * bc))};
  for (int64_t i = 0; i < br; ++i)
    for (int64_t j = 0; j < bc; ++j) {
      double amax = 0;
      for (int64_t r = i * 128; r < std::min(rows, i * 128 + 128); ++r)
        for (int64_t c = j * 128; c < std::min(cols, j * 128 + 128); ++c)
          amax = std::max(amax, std::fabs(static_cast<double>(value_of(src[r * stride + c]))));
      const float scale = reference_scale(static_cast<float>(amax), format);
      out.scales[static_cast<std::size_t>(i * bc + j)] = scale;
      for (int64_t r = i * 128; r < std::min(rows, i * 128 + 128); ++r)
        for (int64_t c = j * 128; c < std::min(cols, j * 128 + 128); ++c)
          out.q[static_cast<std::size_t>(r * cols + c)] =
              reference_e4m3(value_of(src[r * stride + c]) / scale);
    }
  return out;
}

// A [rows, stride] BF16 tensor of random values, with adversarial blocks: all zeros, subnormal
// BF16 only, one huge value among small ones, and the largest finite BF16.
std::vector<uint16_t> tensor(int64_t rows, int64_t stride, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<uint16_t> t(static_cast<std::size_t>(rows * stride));
  for (auto& h : t) h = bf16_of(normal(rng));
  auto block = [&](int64_t bi, int64_t bj, auto value) {
    for (int64_t r = bi * 128; r < std::min(rows, bi * 128 + 128); ++r)
      for (int64_t c = bj * 128; c < std::min(stride, bj * 128 + 128); ++c)
        t[static_cast<std::size_t>(r * stride + c)] = value(r, c);
  };
  block(0, 0, [](int64_t, int64_t) { return uint16_t{0}; });
  block(0, 1, [](int64_t r, int64_t c) { return static_cast<uint16_t>(((r + c) % 127) + 1); });
  block(1, 0, [&](int64_t r, int64_t c) {
    return r == 130 && c == 7 ? bf16_of(3e38f) : bf16_of(normal(rng));
  });
  block(1, 1, [](int64_t r, int64_t c) {
    return static_cast<uint16_t>((r + c) % 2 ? 0x7F7F : 0xFF7F);  // ±the largest BF16
  });
  return t;
}

TEST(BlockFp8, BlocksEqualTheReferenceWithEdgeBlocksAndARowSlice) {
  for (ScaleFormat format : {ScaleFormat::kFp32, ScaleFormat::kUe8m0})
    for (auto [rows, cols, stride] : {std::tuple<int64_t, int64_t, int64_t>{300, 200, 200},
                                      {256, 256, 256},
                                      {130, 300, 520},
                                      {1, 5, 5}}) {
      const auto src = tensor(rows, stride, static_cast<uint32_t>(rows + cols));
      const Quantized got = quantize(src, rows, cols, stride, format);
      const Quantized want = reference_quantize(src, rows, cols, stride, format);
      EXPECT_EQ(got.scales, want.scales) << rows << "x" << cols;
      ASSERT_EQ(got.q, want.q) << rows << "x" << cols;
      if (format == ScaleFormat::kUe8m0)
        for (float s : got.scales) {
          int e = 0;
          EXPECT_EQ(std::frexp(s, &e), 0.5f) << s;  // a power of two
        }
    }
}

// Shards that cut blocks, as FSDP's rows (and columns) cut them: each shard takes the maxima of
// what it holds of each block it touches, the shards that share a block combine theirs, and each
// quantizes its own elements; put back together, the values and scales are the whole weight's, and
// so the independent reference's, bit for bit.
struct Shard {
  int64_t lo, hi;  // rows, or columns
};

Quantized quantize_in_shards(const std::vector<uint16_t>& src, int64_t rows, int64_t cols,
                             const std::vector<Shard>& shards, bool by_rows, ScaleFormat format) {
  const int64_t brs = (rows + 127) / 128, bcs = (cols + 127) / 128;
  std::vector<Bf16Matrix> parts;
  for (const Shard& s : shards)
    parts.push_back(by_rows ? Bf16Matrix{src.data() + s.lo * cols, s.hi - s.lo, cols, cols, s.lo, 0}
                            : Bf16Matrix{src.data() + s.lo, rows, s.hi - s.lo, cols, 0, s.lo});
  // Each shard's partial maxima, then the combination every shard would receive from the others.
  std::vector<uint16_t> combined(static_cast<std::size_t>(brs * bcs), 0);
  std::vector<std::vector<uint16_t>> partial;
  for (const Bf16Matrix& m : parts) {
    const BlockSpan span = blocks_touched(m);
    partial.emplace_back(static_cast<std::size_t>(span.count()), 0xFFFF);
    block_amax(m, partial.back().data(), "w");
    for (int64_t i = 0; i < span.rows; ++i)
      for (int64_t j = 0; j < span.cols; ++j) {
        auto& c =
            combined[static_cast<std::size_t>((span.first_row + i) * bcs + span.first_col + j)];
        c = std::max(c, partial.back()[static_cast<std::size_t>(i * span.cols + j)]);
      }
  }
  Quantized out{std::vector<uint8_t>(static_cast<std::size_t>(rows * cols), 0xAA),
                std::vector<float>(static_cast<std::size_t>(brs * bcs), -1.0f)};
  for (std::size_t k = 0; k < parts.size(); ++k) {
    const Bf16Matrix& m = parts[k];
    const BlockSpan span = blocks_touched(m);
    std::vector<float> scales;
    for (int64_t i = 0; i < span.rows; ++i)
      for (int64_t j = 0; j < span.cols; ++j) {
        const std::size_t at =
            static_cast<std::size_t>((span.first_row + i) * bcs + span.first_col + j);
        scales.push_back(scale_of_amax(combined[at], format));
        out.scales[at] = scales.back();  // every shard of a block agrees on its scale
      }
    std::vector<uint8_t> q(static_cast<std::size_t>(m.rows * m.cols));
    quantize_with_scales(m, scales.data(), q.data());
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t c = 0; c < m.cols; ++c)
        out.q[static_cast<std::size_t>((r + m.row_origin) * cols + c + m.col_origin)] =
            q[static_cast<std::size_t>(r * m.cols + c)];
  }
  return out;
}

TEST(BlockFp8, ShardsThatCutBlocksCombineTheirMaximaIntoTheWholeWeightsQuantization) {
  const int64_t rows = 300, cols = 260;
  const auto src = tensor(rows, cols, 7);
  for (ScaleFormat format : {ScaleFormat::kFp32, ScaleFormat::kUe8m0}) {
    const Quantized want = reference_quantize(src, rows, cols, cols, format);
    // FSDP's chunks of 300 rows over 3 ranks (100 each: blocks 0 and 1 cut), over 7 (43 each: a
    // block shared by 3 or 4 ranks), one rank holding nothing, and a cut by columns.
    for (const auto& [shards, by_rows] :
         {std::pair{std::vector<Shard>{{0, 100}, {100, 200}, {200, 300}}, true},
          {std::vector<Shard>{
               {0, 43}, {43, 86}, {86, 129}, {129, 172}, {172, 215}, {215, 258}, {258, 300}},
           true},
          {std::vector<Shard>{{0, 128}, {128, 128}, {128, 300}}, true},
          {std::vector<Shard>{{0, 130}, {130, 260}}, false}}) {
      const Quantized got = quantize_in_shards(src, rows, cols, shards, by_rows, format);
      EXPECT_EQ(got.scales, want.scales) << shards.size() << (by_rows ? " row" : " column");
      ASSERT_EQ(got.q, want.q) << shards.size() << (by_rows ? " row" : " column") << " shards";
    }
  }
  // A shard's blocks: rows 100..200 touch block rows 0 and 1 (both cut).
  const BlockSpan span = blocks_touched({src.data(), 100, cols, cols, 100, 0});
  EXPECT_EQ(span.first_row, 0);
  EXPECT_EQ(span.rows, 2);
  EXPECT_EQ(span.cols, 3);
}

TEST(BlockFp8, ANanInAShardIsRefusedNamingTheElementInTheWeight) {
  std::vector<uint16_t> src(64 * 16, bf16_of(1.0f));
  src[5 * 16 + 3] = 0x7FC0;       // NaN at the shard's [5, 3]: the weight's [105, 3]
  std::vector<uint16_t> amax(2);  // rows 100..164: block rows 0 and 1
  try {
    block_amax({src.data(), 64, 16, 16, 100, 0}, amax.data(), "layers.2.w");
    FAIL() << "no error";
  } catch (const sdk::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot send tensor 'layers.2.w' as block FP8: element "
                                    "[105, 3] is NaN"));
  }
}

TEST(BlockFp8, ZeroBlockGetsTheLeastNormalScaleAndZeros) {
  const std::vector<uint16_t> zeros(128 * 128, 0);
  const Quantized got = quantize(zeros, 128, 128, 128, ScaleFormat::kFp32);
  EXPECT_EQ(got.scales[0], 0x1p-126f);
  for (uint8_t b : got.q) ASSERT_EQ(b, 0);
}

TEST(BlockFp8, TheBlockMaximumLandsOnPlusOrMinus448) {
  std::vector<uint16_t> t(128 * 128, bf16_of(0.5f));
  t[77] = bf16_of(-3.0f);
  const Quantized got = quantize(t, 128, 128, 128, ScaleFormat::kFp32);
  EXPECT_EQ(got.scales[0], 3.0f / 448.0f);
  EXPECT_EQ(got.q[77], 0xFE);  // -448
  EXPECT_EQ(from_e4m3(got.q[0]), from_e4m3(reference_e4m3(0.5f / (3.0f / 448.0f))));
}

TEST(BlockFp8, NanAndInfinityAreRefusedNamingTheTensorAndTheElement) {
  for (auto [bits, what] : {std::pair<uint16_t, const char*>{0x7FC0, "NaN"},
                            {0x7F80, "infinity"},
                            {0xFF80, "-infinity"}}) {
    std::vector<uint16_t> t(200 * 300, bf16_of(1.0f));
    t[150 * 300 + 260] = bits;
    std::vector<uint8_t> q(200 * 300, 0xAA);
    std::vector<float> s(2 * 3, -1.0f);
    try {
      quantize_bf16({t.data(), 200, 300, 300}, {q.data(), s.data()}, ScaleFormat::kFp32,
                    "model.layers.0.mlp.down_proj.weight");
      FAIL() << "not refused";
    } catch (const sdk::Error& e) {
      EXPECT_EQ(e.code(), WT_ERR_INVALID_ARGUMENT);
      EXPECT_THAT(e.what(), HasSubstr(std::string("cannot send tensor "
                                                  "'model.layers.0.mlp.down_proj.weight' as block "
                                                  "FP8: element [150, 260] is ") +
                                      what + "; no scale can carry it"));
    }
    // The refused block (rows 128.., columns 256..) was not written.
    EXPECT_EQ(s[5], -1.0f);
    EXPECT_EQ(q[150 * 300 + 260], 0xAA);
  }
}

TEST(BlockFp8, BytesAreTheValuesAndOneFp32ScalePerBlock) {
  EXPECT_EQ(bytes_of(128, 128), 128u * 128u + 4u);
  EXPECT_EQ(bytes_of(7168, 2048), 7168u * 2048u + 4u * 56u * 16u);
  EXPECT_EQ(bytes_of(300, 200), 300u * 200u + 4u * 3u * 2u);
}

}  // namespace
}  // namespace wt::plugins::fp8
