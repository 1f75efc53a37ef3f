#include "round_table.hpp"

#include "box_copy.hpp"

#include <wt/dtype.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace wt::m2n {

namespace {

// The piece's box in the full tensor, in a tensor of `strides`: the callers move it into theirs.
PieceGeometry full_box(const Transfer& t, const std::vector<int64_t>& strides, DLDataType dtype) {
  PieceGeometry g;
  g.strides = &strides;
  g.lo = t.piece->box.lo;
  g.hi = t.piece->box.hi;
  g.elem = element_size(dtype);
  return g;
}

}  // namespace

PieceGeometry sender_geometry(const Transfer& t, const ParamMeta& meta,
                              const std::vector<int64_t>& strides,
                              const std::vector<int64_t>& compact) {
  PieceGeometry g = full_box(t, strides, meta.dtype);
  if (meta.sharded()) {  // the piece in this rank's slice
    g.lo[static_cast<std::size_t>(meta.shard_dim)] -= meta.shard_offset;
    g.hi[static_cast<std::size_t>(meta.shard_dim)] -= meta.shard_offset;
  }
  g.contiguous = strides == compact && box_is_contiguous(meta.local_shape(), g.lo, g.hi);
  return g;
}

PieceGeometry receiver_geometry(const Transfer& t, DLDataType dtype, const Box& needed,
                                const std::vector<int64_t>& shape,
                                const std::vector<int64_t>& strides) {
  PieceGeometry g = full_box(t, strides, dtype);
  for (std::size_t d = 0; d < g.lo.size(); ++d) {  // the piece in this rank's slice
    g.lo[d] -= needed.lo[d];
    g.hi[d] -= needed.lo[d];
  }
  g.contiguous = box_is_contiguous(shape, g.lo, g.hi);
  return g;
}

RoundTable compile_table(const std::vector<Transfer>& transfers,
                         const std::vector<Message>& messages,
                         const std::vector<std::string>& names,
                         const std::function<PieceGeometry(const Transfer&)>& geometry,
                         const char* toward, const char* peer_name) {
  RoundTable table;
  table.messages.reserve(messages.size());
  std::vector<uint64_t> next;  // per peer: the number of its next message
  for (const Message& msg : messages) {
    const auto peer = static_cast<std::size_t>(msg.peer);
    if (next.size() <= peer) next.resize(peer + 1, 1);
    TableMessage& m = table.messages.emplace_back();
    m.peer = msg.peer;
    m.number = next[peer]++;
    m.bytes = msg.bytes;
    const Transfer& first = transfers[msg.transfers.front()];
    m.what = msg.transfers.size() == 1
                 ? fmt::format("a piece of '{}' {} {} {}", names[first.param], toward, peer_name,
                               msg.peer)
                 : fmt::format("{} pieces from '{}' on {} {} {}", msg.transfers.size(),
                               names[first.param], toward, peer_name, msg.peer);
    if (msg.transfers.size() == 1) {
      const PieceGeometry g = geometry(first);
      if (g.contiguous) {
        m.in_place = true;
        m.param = static_cast<uint32_t>(first.param);
        int64_t at = 0;
        for (std::size_t d = 0; d < g.lo.size(); ++d) at += g.lo[d] * (*g.strides)[d];
        m.tensor_at = static_cast<uint64_t>(at) * g.elem;
        continue;
      }
    }
    m.copies_at = static_cast<uint32_t>(table.copies.size());
    for (std::size_t i : msg.transfers) {
      const Transfer& t = transfers[i];
      const PieceGeometry g = geometry(t);
      table.copies.push_back(compile_copy(static_cast<uint32_t>(t.param), *g.strides, g.lo, g.hi,
                                          g.elem, table.walks));
    }
    m.copies = static_cast<uint32_t>(msg.transfers.size());
    table.packed_bytes += m.bytes;
    table.largest_packed = std::max(table.largest_packed, m.bytes);
    ++table.packed_messages;
  }
  table.walks.known.clear();  // only compiling looks walks up
  return table;
}

void StagingRing::reset(uint64_t capacity, std::size_t max_entries) {
  capacity_ = capacity;
  entries_.assign(std::max<std::size_t>(max_entries, 1), Entry{});
  first_ = count_ = 0;
}

int64_t StagingRing::take(uint64_t n) {
  if (n > capacity_ || count_ == entries_.size()) return -1;
  uint64_t at = 0;
  if (count_ > 0) {
    const uint64_t oldest = entries_[first_].at;
    // Each message starts on a cache line: the copy threads' shares stay aligned.
    const uint64_t end = entries_[(first_ + count_ - 1) % entries_.size()].end;
    const uint64_t head = (end + kAlign - 1) / kAlign * kAlign;
    if (end > oldest) {  // live bytes in [oldest, end)
      if (head + n <= capacity_)
        at = head;
      else if (n <= oldest)
        at = 0;  // wraps: the start is free up to the oldest
      else
        return -1;
    } else {  // wrapped: live bytes in [oldest, capacity) and [0, end)
      if (head + n > oldest) return -1;
      at = head;
    }
  }
  entries_[(first_ + count_) % entries_.size()] = {at, at + n};
  ++count_;
  return static_cast<int64_t>(at);
}

void StagingRing::give_back_oldest() {
  if (count_ == 0) return;
  first_ = (first_ + 1) % entries_.size();
  --count_;
}

uint64_t staging_bytes(const RoundTable& table) {
  return std::min(table.packed_bytes, std::max(kInFlightBytes, table.largest_packed));
}

}  // namespace wt::m2n
