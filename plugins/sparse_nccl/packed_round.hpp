// The wire of a round of patches in host memory (Gloo): every patch's indices back to back
// (int32), then every patch's values, each aligned to its element size, in one broadcast. vLLM's
// wire (two broadcasts per patch: indices, then values) stays the one for CUDA rounds, where
// NCCL peers may be vLLM's own workers; on host memory there is no such peer, and one broadcast
// instead of two per patch removes a transport round trip per message, which dominates a 1 % round
// (128 messages of a few KiB for a 64-tensor model). Sender and worker compute the layout alike
// from the update info (counts and dtypes).
#pragma once

#include <wt/sdk/errors.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace wt::sparse {

struct PackedRoundLayout {
  std::vector<uint64_t> indices_at, values_at;  // byte offsets, per patch
  uint64_t bytes = 0;                           // the whole round
};

// counts[i] elements of element_sizes[i] bytes each. Counts come from the wire on the worker's
// side: a round whose size would not fit 64 bits is refused.
inline PackedRoundLayout packed_round_layout(const std::vector<int64_t>& counts,
                                             const std::vector<std::size_t>& element_sizes) {
  PackedRoundLayout out;
  auto refuse = [] {
    sdk::fail(WT_ERR_INVALID_ARGUMENT,
              "a packed sparse round would hold more bytes than 64 bits can count");
  };
  auto add = [&](uint64_t a, uint64_t b) {
    if (b > UINT64_MAX - a) refuse();
    return a + b;
  };
  auto times = [&](int64_t n, uint64_t size) {
    if (n < 0 || static_cast<uint64_t>(n) > UINT64_MAX / size) refuse();
    return static_cast<uint64_t>(n) * size;
  };
  uint64_t at = 0;
  for (auto n : counts) {
    out.indices_at.push_back(at);
    at = add(at, times(n, 4));
  }
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const uint64_t es = element_sizes[i] == 0 ? 1 : element_sizes[i];
    at = add(at, (es - at % es) % es);
    out.values_at.push_back(at);
    at = add(at, times(counts[i], es));
  }
  out.bytes = at;
  return out;
}

// A round packed for the wire. The buffer is kept from round to round (grown when a round needs
// more), so packing writes to memory already mapped.
class PackedRound {
 public:
  // Makes room for `layout` (uninitialised) and takes its offsets. A round that needs much less
  // than the buffer holds gets a smaller one: one large round does not pin its memory.
  unsigned char* prepare(PackedRoundLayout layout) {
    if (capacity_ < layout.bytes || layout.bytes < capacity_ / 4) {
      data_.reset(new unsigned char[layout.bytes]);
      capacity_ = layout.bytes;
    }
    layout_ = std::move(layout);
    return data_.get();
  }
  unsigned char* data() { return data_.get(); }
  const PackedRoundLayout& layout() const { return layout_; }

 private:
  std::unique_ptr<unsigned char[]> data_;
  uint64_t capacity_ = 0;
  PackedRoundLayout layout_;
};

}  // namespace wt::sparse
