// `source.shard: {rank_of: trainer, dim: D}`: trainer rank k of n holds only its slice of every
// parameter, as FSDP shards one: dimension D split in chunks of ceil(size / n) (the last ranks
// may hold less, or nothing); a parameter with D or fewer dimensions is held whole. The slice is
// a view into the full tensor (strided for D > 0), so nothing is copied; only backends that move
// shards (WT_CAP_SHARDED_SOURCE: m2n) take such a source.
#pragma once

#include <wt/dtype.hpp>
#include <wt/weight_source.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace wt::cli {

class ShardedSource final : public WeightSource {
 public:
  ShardedSource(WeightSource& inner, int rank, int ranks, int dim)
      : inner_(inner), rank_(rank), ranks_(ranks), dim_(dim) {}

  const std::vector<ParamMeta>& metadata() override {
    meta_ = inner_.metadata();
    for (auto& m : meta_) {
      if (static_cast<int>(m.shape.size()) <= dim_) continue;
      const int64_t size = m.shape[static_cast<std::size_t>(dim_)];
      const int64_t chunk = (size + ranks_ - 1) / ranks_;
      const int64_t lo = std::min(size, chunk * rank_), hi = std::min(size, lo + chunk);
      m.shard_dim = dim_;
      m.shard_offset = lo;
      m.shard_length = hi - lo;
    }
    return meta_;
  }
  void begin() override {
    metadata();
    shapes_.assign(meta_.size(), {});
    strides_.assign(meta_.size(), {});
    index_ = 0;
    inner_.begin();
  }
  bool next(wt_tensor& out) override {
    if (!inner_.next(out)) return false;
    const std::size_t i = index_++;
    if (i >= meta_.size() || !meta_[i].sharded()) return true;
    const ParamMeta& m = meta_[i];
    DLTensor& t = out.tensor;
    auto& strides = strides_[i];
    if (t.strides != nullptr) {
      strides.assign(t.strides, t.strides + t.ndim);
    } else {
      strides.assign(static_cast<std::size_t>(t.ndim), 1);
      for (int d = t.ndim - 1; d > 0; --d) strides[d - 1] = strides[d] * t.shape[d];
    }
    shapes_[i] = m.local_shape();
    const std::size_t elem = element_size(t.dtype);
    t.byte_offset += static_cast<uint64_t>(m.shard_offset * strides[m.shard_dim]) * elem;
    t.shape = shapes_[i].data();
    // A slice along dimension 0 of a compact tensor is compact itself.
    t.strides = dim_ == 0 && out.tensor.strides == nullptr ? nullptr : strides.data();
    return true;
  }
  void end() override { inner_.end(); }

 private:
  WeightSource& inner_;
  int rank_, ranks_, dim_;
  std::vector<ParamMeta> meta_;
  std::vector<std::vector<int64_t>> shapes_, strides_;
  std::size_t index_ = 0;
};

}  // namespace wt::cli
