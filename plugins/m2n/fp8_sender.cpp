#include "fp8_sender.hpp"

#include "block_fp8_layout.hpp"
#include "m2n_wire.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/errors.hpp>
#include <wt/sdk/parallel_for.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <map>

namespace wt::m2n {

namespace fp8 = plugins::fp8;
using sdk::fail;

namespace {

constexpr DLDataType kBf16{kDLBfloat, 16, 1};
constexpr DLDataType kFp8{kDLFloat8E4m3fnCode, 8, 1};
constexpr DLDataType kScale{kDLFloat, 32, 1};

int64_t blocks_of(int64_t n) {
  return (n + fp8::kBlock - 1) / fp8::kBlock;
}

}  // namespace

Fp8Sender::Fp8Sender(const std::vector<ParamMeta>& meta, const std::unordered_set<std::string>& fp8,
                     const std::vector<RankHoldings>& per_rank, int rank, fp8::ScaleFormat format)
    : format_(format) {
  for (std::size_t p = 0; p < meta.size(); ++p) {
    const ParamMeta& m = meta[p];
    wire_of_.push_back(wire_meta_.size());
    if (!fp8.count(m.name)) {
      wire_meta_.push_back(m);
      continue;
    }
    if (!(m.dtype == kBf16))
      fail(WT_ERR_INVALID_ARGUMENT,
           "block FP8 quantizes bfloat16 weights, and '{}' is {}: send it as bfloat16, or leave "
           "the init info's wire_dtype as-held",
           m.name, torch_name(m.dtype));
    const std::size_t nd = m.shape.size();  // two or more (sent_as_fp8)
    Weight w;
    w.param = p;
    w.wire = wire_meta_.size();
    w.value_shape = m.local_shape();
    w.rows = w.value_shape[nd - 2];
    w.cols = w.value_shape[nd - 1];
    for (std::size_t d = 0; d + 2 < nd; ++d) w.matrices *= w.value_shape[d];
    if (m.sharded() && static_cast<std::size_t>(m.shard_dim) + 2 >= nd) {
      w.dim = m.shard_dim - static_cast<int>(nd - 2);
      w.origin = m.shard_offset;
    } else if (m.sharded() && m.shard_dim == 0) {
      w.leading_origin = m.shard_offset;
    }
    w.span = fp8::blocks_touched(
        {nullptr, w.rows, w.cols, w.cols, w.dim == 0 ? w.origin : 0, w.dim == 1 ? w.origin : 0});
    const auto blocks = static_cast<std::size_t>(w.matrices * w.span.count());
    w.amax.assign(blocks, 0);
    w.scales.assign(blocks, 0.0f);
    w.values.assign(static_cast<std::size_t>(w.matrices * w.rows * w.cols), 0);
    ParamMeta values = m;
    values.dtype = kFp8;
    ParamMeta scales = m;
    scales.name = scale_name_of(m.name);
    scales.dtype = kScale;
    scales.shape[nd - 2] = blocks_of(m.shape[nd - 2]);
    scales.shape[nd - 1] = blocks_of(m.shape[nd - 1]);
    if (w.dim >= 0) {  // the blocks it touches along the dimension its slice cuts
      scales.shard_offset = w.dim == 0 ? w.span.first_row : w.span.first_col;
      scales.shard_length = w.dim == 0 ? w.span.rows : w.span.cols;
    }
    w.scale_shape = scales.local_shape();
    wire_meta_.push_back(std::move(values));
    wire_meta_.push_back(std::move(scales));
    weights_.push_back(std::move(w));
  }
  add_shared(meta, per_rank, rank);
  wire_.resize(wire_meta_.size());
}

void Fp8Sender::add_shared(const std::vector<ParamMeta>& meta,
                           const std::vector<RankHoldings>& per_rank, int rank) {
  std::vector<RankHoldings::Cursor> cursors;
  for (const RankHoldings& h : per_rank) cursors.emplace_back(h);
  std::map<int, Peer> peers;
  std::vector<RankHoldings::Slice> slices(per_rank.size());
  std::size_t wi = 0;
  for (std::size_t p = 0; p < meta.size(); ++p) {
    for (std::size_t k = 0; k < cursors.size(); ++k) slices[k] = cursors[k].next(meta[p]);
    if (wi == weights_.size() || weights_[wi].param != p) continue;
    const Weight& w = weights_[wi++];
    const int nd = static_cast<int>(meta[p].shape.size());
    // A slice cuts blocks when it starts or ends inside one. Then every rank that holds any of
    // the weight must slice the same dimension, so that the ranks sharing a block find each other.
    int cutting = -1;
    for (const auto& s : slices) {
      if (s.dim < nd - 2 || s.lo >= s.hi) continue;
      const int64_t size = meta[p].shape[static_cast<std::size_t>(s.dim)];
      if (s.lo % fp8::kBlock != 0 || (s.hi % fp8::kBlock != 0 && s.hi != size)) cutting = s.dim;
    }
    if (cutting >= 0)
      for (std::size_t k = 0; k < slices.size(); ++k) {
        const auto& s = slices[k];
        if (s.dim >= 0 && s.lo >= s.hi) continue;  // holds nothing
        if (s.dim != cutting)
          fail(WT_ERR_INVALID_ARGUMENT,
               "block FP8: a trainer rank's slice of '{}' along dimension {} cuts its 128 x 128 "
               "blocks, and trainer rank {} holds it {}: the ranks that share a block must "
               "slice the same dimension to combine their maxima",
               meta[p].name, cutting, k,
               s.dim < 0 ? std::string("whole") : fmt::format("sliced along dimension {}", s.dim));
      }
    if (w.dim < 0) continue;
    const int64_t mine_lo = w.dim == 0 ? w.span.first_row : w.span.first_col;
    const int64_t mine_hi = mine_lo + (w.dim == 0 ? w.span.rows : w.span.cols);
    for (std::size_t k = 0; k < slices.size(); ++k) {
      const auto& s = slices[k];
      if (static_cast<int>(k) == rank || s.dim != w.dim + nd - 2 || s.lo >= s.hi) continue;
      const int64_t lo = std::max(mine_lo, s.lo / fp8::kBlock);
      const int64_t hi = std::min(mine_hi, blocks_of(s.hi));
      if (lo < hi) peers[static_cast<int>(k)].shared.push_back({wi - 1, lo, hi});
    }
  }
  for (auto& [k, peer] : peers) {
    peer.rank = k;
    std::size_t n = 0;
    for (const Shared& s : peer.shared) {
      const Weight& w = weights_[s.weight];
      n += static_cast<std::size_t>(w.matrices * (s.hi - s.lo) *
                                    (w.dim == 0 ? w.span.cols : w.span.rows));
    }
    if (n == 0) continue;  // blocks of no elements (a dimension of 0): nothing to agree on
    peer.out.assign(n, 0);
    peer.in.assign(n, 0);
    peer.what_out = fmt::format("the block-FP8 maxima to trainer rank {}", k);
    peer.what_in = fmt::format("the block-FP8 maxima from trainer rank {}", k);
    peers_.push_back(std::move(peer));
  }
}

fp8::Bf16Matrix Fp8Sender::matrix(const Weight& w, const DLTensor& t, int64_t m) {
  const auto nd = static_cast<std::size_t>(t.ndim);
  int64_t at = 0, row_stride = w.cols;
  if (t.strides == nullptr) {
    at = m * w.rows * w.cols;
  } else {  // m over the leading dimensions, each at its stride
    row_stride = t.strides[nd - 2];
    for (std::size_t d = nd - 2, rest = static_cast<std::size_t>(m); d-- > 0;) {
      at += static_cast<int64_t>(rest % static_cast<std::size_t>(w.value_shape[d])) * t.strides[d];
      rest /= static_cast<std::size_t>(w.value_shape[d]);
    }
  }
  const auto* base =
      reinterpret_cast<const uint16_t*>(static_cast<const unsigned char*>(t.data) + t.byte_offset);
  return {
      base + at, w.rows, w.cols, row_stride, w.dim == 0 ? w.origin : 0, w.dim == 1 ? w.origin : 0};
}

std::string Fp8Sender::name_of(const Weight& w, int64_t m) const {
  const std::string& name = wire_meta_[w.wire].name;
  if (w.value_shape.size() <= 2) return name;
  return fmt::format("{}[{}]", name, w.leading_origin + m);  // one leading dimension: its index
}

void Fp8Sender::exchange_maxima(Peer& peer, bool take) {
  std::size_t at = 0;
  for (const Shared& s : peer.shared) {
    Weight& w = weights_[s.weight];
    const int64_t per = w.span.count();
    for (int64_t m = 0; m < w.matrices; ++m)
      for (int64_t i = s.lo; i < s.hi; ++i) {
        const int64_t across = w.dim == 0 ? w.span.cols : w.span.rows;
        for (int64_t j = 0; j < across; ++j) {
          const int64_t br = w.dim == 0 ? i - w.span.first_row : j;
          const int64_t bc = w.dim == 0 ? j : i - w.span.first_col;
          uint16_t& mine = w.amax[static_cast<std::size_t>(m * per + br * w.span.cols + bc)];
          if (take)
            mine = std::max(mine, peer.in[at++]);
          else
            peer.out[at++] = mine;
        }
      }
  }
}

const std::vector<wt_tensor>& Fp8Sender::prepare(const std::vector<wt_tensor>& source,
                                                 Transfers& transfers, uint32_t round,
                                                 unsigned threads,
                                                 const sdk::AbortSignal& aborted) {
  for (std::size_t p = 0; p < source.size(); ++p) {
    wt_tensor& t = wire_[wire_of_[p]];
    t = source[p];
    t.name = wire_meta_[wire_of_[p]].name.c_str();
  }
  // Runs step(w) for every weight on the threads; the first weight's failure is the round's.
  auto each_weight = [&](auto&& step) {
    std::vector<std::exception_ptr> failed(weights_.size());
    parallel_for(weights_.size(), threads, [&](std::size_t i) {
      try {
        if (aborted.aborted()) fail(WT_ERR_ABORTED, "the m2n trainer engine was aborted");
        step(weights_[i]);
      } catch (...) {
        failed[i] = std::current_exception();
      }
    });
    for (auto& f : failed)
      if (f) std::rethrow_exception(f);
  };
  // This rank's maxima of every block it touches.
  each_weight([&](Weight& w) {
    const DLTensor& t = source[w.param].tensor;
    if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost)
      fail(WT_ERR_INVALID_ARGUMENT, "block FP8 quantizes host memory; '{}' is not in it",
           wire_meta_[w.wire].name);
    if (!(t.dtype == kBf16))
      fail(WT_ERR_INVALID_ARGUMENT, "block FP8 quantizes bfloat16 tensors; the source's '{}' is {}",
           wire_meta_[w.wire].name, torch_name(t.dtype));
    if (t.strides != nullptr && t.strides[t.ndim - 1] != 1 && w.cols > 1)
      fail(WT_ERR_INVALID_ARGUMENT,
           "block FP8 reads each row's elements back to back; the source's '{}' has them {} "
           "apart (a transposed view: send a contiguous copy)",
           wire_meta_[w.wire].name, t.strides[t.ndim - 1]);
    const int64_t per = w.span.count();
    for (int64_t m = 0; m < w.matrices; ++m)
      fp8::block_amax(matrix(w, t, m), w.amax.data() + m * per, name_of(w, m));
  });
  // The blocks this rank shares: every rank that holds part of one takes the largest maximum.
  if (!peers_.empty()) {
    for (Peer& peer : peers_) {
      exchange_maxima(peer, false);
      transfers.post_send(peer.rank, slot(round, 1), peer.out.data(), peer.out.size() * 2,
                          peer.what_out);
      transfers.post_recv(peer.rank, slot(round, 1), peer.in.data(), peer.in.size() * 2,
                          peer.what_in);
    }
    transfers.wait_all();
    for (Peer& peer : peers_) exchange_maxima(peer, true);
  }
  each_weight([&](Weight& w) {
    for (std::size_t b = 0; b < w.amax.size(); ++b)
      w.scales[b] = fp8::scale_of_amax(w.amax[b], format_);
    const int64_t per = w.span.count();
    for (int64_t m = 0; m < w.matrices; ++m)
      fp8::quantize_with_scales(matrix(w, source[w.param].tensor, m), w.scales.data() + m * per,
                                w.values.data() + m * w.rows * w.cols);
  });
  for (Weight& w : weights_) {
    const DLDevice host{kDLCPU, 0};
    wire_[w.wire].tensor = DLTensor{w.values.data(),
                                    host,
                                    static_cast<int32_t>(w.value_shape.size()),
                                    kFp8,
                                    w.value_shape.data(),
                                    nullptr,
                                    0};
    wire_[w.wire + 1].name = wire_meta_[w.wire + 1].name.c_str();
    wire_[w.wire + 1].tensor = DLTensor{w.scales.data(),
                                        host,
                                        static_cast<int32_t>(w.scale_shape.size()),
                                        kScale,
                                        w.scale_shape.data(),
                                        nullptr,
                                        0};
  }
  return wire_;
}

uint64_t Fp8Sender::buffer_bytes() const {
  uint64_t n = 0;
  for (const Weight& w : weights_) n += w.values.size() + w.scales.size() * 4 + w.amax.size() * 2;
  return n;
}

}  // namespace wt::m2n
