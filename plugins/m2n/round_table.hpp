// One rank's side of a round, compiled once from its schedule (transfers and messages) and the
// geometry of its own tensors, and then only executed: per message its peer, its number on the
// pair, its bytes, and either where its bytes lie in place or the compiled copies that pack (a
// trainer rank) or unpack (a worker rank) it, plus the name its errors give it. Executing a round
// formats nothing and works nothing out: it posts what the table says.
//
// m2n's round is one phase: every message of the table is in flight within the same bracket, the
// same set at both ends (the frames' digests check that before a weight byte moves).
#pragma once

#include "compiled_copies.hpp"
#include "m2n_schedule.hpp"

#include <wt/tensor.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace wt::m2n {

struct TableMessage {
  int peer = 0;         // the trainer or worker rank on the other end
  uint64_t number = 0;  // its place among the pair's messages this round, from 1 (slot())
  uint64_t bytes = 0;
  bool in_place = false;  // moved straight from/into tensor `param` at `tensor_at`
  uint32_t param = 0;
  uint64_t tensor_at = 0;
  uint32_t copies_at = 0, copies = 0;  // packed: its copies in RoundTable::copies
  std::string what;                    // "a piece of 'w' to worker rank 3"
};

struct RoundTable {
  std::vector<TableMessage> messages;  // in the schedule's order
  std::vector<CompiledCopy> copies;
  CopyWalks walks;
  uint64_t packed_bytes = 0;    // bytes of the messages that travel through a buffer
  uint64_t largest_packed = 0;  // the largest such message
  std::size_t packed_messages = 0;

  std::span<const CompiledCopy> copies_of(const TableMessage& m) const {
    return {copies.data() + m.copies_at, m.copies};
  }
};

// Where a transfer's piece lies in this rank's own tensor of it: the tensor's element strides,
// the box relative to the tensor's first element, the element size, and whether the box's bytes
// lie back to back there.
struct PieceGeometry {
  const std::vector<int64_t>* strides = nullptr;
  std::vector<int64_t> lo, hi;
  std::size_t elem = 0;
  bool contiguous = false;
};

// A trainer rank's piece in the slice of the parameter it holds (`meta`: its shard, if any),
// whose elements are `strides` apart; `compact`: the slice's compact strides.
PieceGeometry sender_geometry(const Transfer& t, const ParamMeta& meta,
                              const std::vector<int64_t>& strides,
                              const std::vector<int64_t>& compact);
// A worker rank's piece in its TP slice of the parameter: the box `needed` of the full tensor,
// held as a compact tensor of `shape` (`strides`, compact).
PieceGeometry receiver_geometry(const Transfer& t, DLDataType dtype, const Box& needed,
                                const std::vector<int64_t>& shape,
                                const std::vector<int64_t>& strides);

// `peer_name`: "worker rank" or "trainer rank"; `toward`: "to" or "from". A message of one piece
// whose bytes lie back to back in the tensor is in place when the plan says so at both ends
// (Transfer::in_place) or the message is a single piece anyway: the caller's geometry decides.
RoundTable compile_table(const std::vector<Transfer>& transfers,
                         const std::vector<Message>& messages,
                         const std::vector<std::string>& names,
                         const std::function<PieceGeometry(const Transfer&)>& geometry,
                         const char* toward, const char* peer_name);

// A FIFO of byte ranges of one buffer of `capacity` bytes: the packed messages in flight, oldest
// given back first. take() finds room for a message after the newest one (wrapping to the start
// when the end is short), or says there is none until the oldest go back; an empty ring always
// has room for a message up to its capacity.
class StagingRing {
 public:
  static constexpr uint64_t kAlign = 64;  // where a message may start: a multiple of this
  void reset(uint64_t capacity, std::size_t max_entries);
  uint64_t capacity() const { return capacity_; }
  // The offset of `n` bytes of room, or -1 while there is none.
  int64_t take(uint64_t n);
  void give_back_oldest();
  bool empty() const { return count_ == 0; }
  std::size_t size() const { return count_; }

 private:
  struct Entry {
    uint64_t at = 0, end = 0;
  };
  uint64_t capacity_ = 0;
  std::vector<Entry> entries_;  // a ring of its own: oldest at first_
  std::size_t first_ = 0, count_ = 0;
};

// The ring's size for a table: the bound on bytes in flight, or the largest packed message when
// that is larger, and never more than the round's packed bytes.
uint64_t staging_bytes(const RoundTable& table);

}  // namespace wt::m2n
