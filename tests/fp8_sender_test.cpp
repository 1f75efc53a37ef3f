// A trainer rank's block-FP8 side (plugins/m2n/fp8_sender.hpp), every rank in this process on a
// thread of its own, their maxima passed through an in-memory exchange that refuses a message of
// another length than the one posted for it: shards that cut blocks by rows, by columns (strided
// views) and a 3-D weight cut by rows give back the whole weight's values and scales, bit for bit;
// the ranks that share a block agree on it; slices that could not combine are refused at init.
#include "fp8_sender.hpp"

#include "block_fp8.hpp"
#include "m2n_plan.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/errors.hpp>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

using ::testing::HasSubstr;

namespace wt::m2n {
namespace {

constexpr DLDataType kBf16{kDLBfloat, 16, 1};
namespace fp8 = plugins::fp8;

// Messages between the ranks of this process, matched by (from, to, slot) as Gloo pairs match.
class Exchange {
 public:
  struct Message {
    std::vector<unsigned char> bytes;
  };
  void put(int from, int to, uint64_t slot, const void* data, std::size_t n) {
    std::lock_guard<std::mutex> l(mu_);
    const auto* p = static_cast<const unsigned char*>(data);
    box_[{from, to, slot}].bytes.assign(p, p + n);
    cv_.notify_all();
  }
  std::vector<unsigned char> take(int from, int to, uint64_t slot) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return box_.count({from, to, slot}) != 0; });
    auto out = std::move(box_[{from, to, slot}].bytes);
    box_.erase({from, to, slot});
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::tuple<int, int, uint64_t>, Message> box_;
};

class ExchangeTransfers final : public Transfers {
 public:
  ExchangeTransfers(Exchange& x, int rank) : x_(x), rank_(rank) {}
  void post_send(int peer, uint64_t slot, const void* data, std::size_t bytes,
                 std::string_view) override {
    x_.put(rank_, peer, slot, data, bytes);
    ++posted_;
  }
  void post_recv(int peer, uint64_t slot, void* data, std::size_t bytes,
                 std::string_view what) override {
    recvs_.push_back({peer, slot, data, bytes, std::string(what)});
    ++posted_;
  }
  void wait_all() override {
    for (const auto& r : recvs_) {
      auto got = x_.take(r.peer, rank_, r.slot);
      if (got.size() != r.bytes)
        throw sdk::Error(WT_ERR_REMOTE,
                         fmt::format("{}: {} bytes, {} posted", r.what, got.size(), r.bytes));
      std::memcpy(r.data, got.data(), got.size());
    }
    recvs_.clear();
  }
  void wait_through(std::size_t) override { wait_all(); }
  std::size_t posted() const override { return posted_; }
  void abort() override {}
  bool broken() const override { return false; }
  void discard() override { recvs_.clear(); }

 private:
  struct Recv {
    int peer;
    uint64_t slot;
    void* data;
    std::size_t bytes;
    std::string what;
  };
  Exchange& x_;
  int rank_;
  std::vector<Recv> recvs_;
  std::size_t posted_ = 0;
};

uint16_t bf16_of(float f) {
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);
}

// What rank `rank` of `ranks` holds of a weight split evenly along `dim` (FSDP's chunks).
ParamMeta shard(const std::string& name, std::vector<int64_t> shape, int dim, int rank, int ranks) {
  ParamMeta m{name, kBf16, std::move(shape)};
  const int64_t size = m.shape[static_cast<std::size_t>(dim)];
  const int64_t chunk = (size + ranks - 1) / ranks, lo = std::min(size, chunk * rank);
  m.shard_dim = dim;
  m.shard_offset = lo;
  m.shard_length = std::min(size, lo + chunk) - lo;
  return m;
}

std::vector<RankHoldings> holdings(const std::vector<std::vector<ParamMeta>>& per_rank) {
  std::vector<RankHoldings> out;
  const int ranks = static_cast<int>(per_rank.size());
  for (int k = 0; k < ranks; ++k)
    out.push_back(RankHoldings::from_declaration(
        holdings_declaration(per_rank[static_cast<std::size_t>(k)], k, ranks), k, ranks,
        per_rank[0]));
  return out;
}

// One weight [lead..., rows, cols] split by `ranks` ranks along `dim`: each rank quantizes its
// shard (columns: a strided view of the full tensor) on its own thread; the values and scales
// put back together must equal quantize_bf16 of the whole, matrix by matrix.
void expect_whole_quantization(std::vector<int64_t> shape, int dim, int ranks) {
  const std::size_t nd = shape.size();
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  std::mt19937 rng(static_cast<uint32_t>(numel + dim));
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<uint16_t> full(static_cast<std::size_t>(numel));
  for (auto& h : full) h = bf16_of(normal(rng));
  const int64_t rows = shape[nd - 2], cols = shape[nd - 1], matrices = numel / rows / cols;
  const int64_t brows = (rows + 127) / 128, bcols = (cols + 127) / 128;
  std::vector<uint8_t> want_q(static_cast<std::size_t>(numel));
  std::vector<float> want_s(static_cast<std::size_t>(matrices * brows * bcols));
  for (int64_t m = 0; m < matrices; ++m)
    fp8::quantize_bf16({full.data() + m * rows * cols, rows, cols, cols},
                       {want_q.data() + m * rows * cols, want_s.data() + m * brows * bcols},
                       fp8::ScaleFormat::kFp32, "w");
  std::vector<std::vector<ParamMeta>> meta;
  for (int k = 0; k < ranks; ++k) meta.push_back({shard("w", shape, dim, k, ranks)});
  const auto per_rank = holdings(meta);
  Exchange x;
  std::vector<std::string> errors(static_cast<std::size_t>(ranks));
  std::vector<uint8_t> got_q(want_q.size(), 0xAA);
  std::vector<float> got_s(want_s.size(), -1.0f);
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int k = 0; k < ranks; ++k)
    threads.emplace_back([&, k] {
      try {
        const ParamMeta& m = meta[static_cast<std::size_t>(k)][0];
        Fp8Sender sender({m}, {"w"}, per_rank, k, fp8::ScaleFormat::kFp32);
        // The source: a view of the full tensor at the shard (its strides where it is one).
        std::vector<int64_t> strides(nd, 1);
        for (std::size_t d = nd - 1; d-- > 0;) strides[d] = strides[d + 1] * shape[d + 1];
        auto local = m.local_shape();
        wt_tensor t{};
        t.name = "w";
        t.tensor = DLTensor{full.data() + m.shard_offset * strides[static_cast<std::size_t>(dim)],
                            DLDevice{kDLCPU, 0},
                            static_cast<int32_t>(nd),
                            kBf16,
                            local.data(),
                            strides.data(),
                            0};
        ExchangeTransfers transfers(x, k);
        sdk::AbortSignal never;
        const auto& wire = sender.prepare({t}, transfers, 0, 2, never);
        const auto& wm = sender.wire_meta();
        ASSERT_EQ(wm.size(), 2u);
        EXPECT_EQ(wm[1].name, "w_scale_inv");
        // Values: the shard's place in the whole; scales: the blocks the shard touches.
        std::lock_guard<std::mutex> l(mu);
        const auto* q = static_cast<const uint8_t*>(wire[0].tensor.data);
        const auto* s = static_cast<const float*>(wire[1].tensor.data);
        const auto qs = wm[0].local_shape(), ss = wm[1].local_shape();
        int64_t qn = 1, sn = 1;
        for (auto d : qs) qn *= d;
        for (auto d : ss) sn *= d;
        auto place = [&](const std::vector<int64_t>& local_shape, const std::vector<int64_t>& whole,
                         int64_t offset, int64_t i) {  // the whole tensor's flat index of local i
          int64_t at = 0, stride = 1;
          for (std::size_t d = nd; d-- > 0;) {
            int64_t c = i % local_shape[d];
            i /= local_shape[d];
            if (static_cast<int>(d) == dim) c += offset;
            at += c * stride;
            stride *= whole[d];
          }
          return at;
        };
        std::vector<int64_t> scale_whole = shape;
        scale_whole[nd - 2] = brows;
        scale_whole[nd - 1] = bcols;
        for (int64_t i = 0; i < qn; ++i)
          got_q[static_cast<std::size_t>(place(qs, shape, m.shard_offset, i))] = q[i];
        for (int64_t i = 0; i < sn; ++i) {
          float& at =
              got_s[static_cast<std::size_t>(place(ss, scale_whole, wm[1].shard_offset, i))];
          if (at != -1.0f) EXPECT_EQ(at, s[i]) << "rank " << k << " disagrees on a shared block";
          at = s[i];
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(k)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ASSERT_EQ(e, "");
  EXPECT_EQ(got_s, want_s);
  EXPECT_EQ(got_q, want_q);
}

TEST(Fp8Sender, ShardsThatCutBlocksByRowsGiveTheWholeWeightsQuantization) {
  expect_whole_quantization({300, 260}, 0, 3);  // 100-row shards: two blocks cut
  expect_whole_quantization({300, 260}, 0, 7);  // 43-row shards: a block shared by 3 or 4 ranks
  expect_whole_quantization({10, 130}, 0, 6);   // 2-row shards, the last rank holding nothing
}

TEST(Fp8Sender, ShardsThatCutBlocksByColumnsAreReadAsStridedViews) {
  expect_whole_quantization({200, 300}, 1, 3);
}

TEST(Fp8Sender, AThreeDimensionalWeightCutByRowsGivesEveryMatrixsQuantization) {
  expect_whole_quantization({3, 200, 140}, 1, 3);
  expect_whole_quantization({4, 130, 130}, 0, 3);  // whole matrices: nothing to exchange
}

TEST(Fp8Sender, SlicesThatCouldNotCombineTheirMaximaAreRefusedAtInit) {
  // Rank 0 cuts rows at 100; rank 1 holds the weight whole.
  std::vector<std::vector<ParamMeta>> meta = {{shard("w", {256, 256}, 0, 0, 2)},
                                              {ParamMeta{"w", kBf16, {256, 256}}}};
  meta[0][0].shard_length = 100;
  try {
    Fp8Sender s(meta[0], {"w"}, holdings(meta), 0, fp8::ScaleFormat::kFp32);
    FAIL() << "no error";
  } catch (const sdk::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("block FP8: a trainer rank's slice of 'w' along dimension 0 "
                                    "cuts its 128 x 128 blocks, and trainer rank 1 holds it "
                                    "whole"));
  }
  // Block-aligned rows beside a whole holder: nothing is cut, nothing to refuse.
  meta[0][0].shard_length = 128;
  EXPECT_NO_THROW(Fp8Sender(meta[0], {"w"}, holdings(meta), 0, fp8::ScaleFormat::kFp32));
  // A float32 weight is not quantized.
  std::vector<std::vector<ParamMeta>> f32 = {{ParamMeta{"w", DLDataType{kDLFloat, 32, 1}, {4, 4}}}};
  try {
    Fp8Sender s(f32[0], {"w"}, holdings(f32), 0, fp8::ScaleFormat::kFp32);
    FAIL() << "no error";
  } catch (const sdk::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("block FP8 quantizes bfloat16 weights, and 'w' is float32"));
  }
}

}  // namespace
}  // namespace wt::m2n
