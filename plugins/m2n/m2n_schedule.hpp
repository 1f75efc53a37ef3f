// One round of the plan, as each rank walks it: which pieces trainer rank k sends (by parameter,
// then worker rank, then piece) and which worker rank w receives (by parameter, then piece). Both
// sides list a pair's pieces in the same order, so the n-th message on a pair is the same piece
// at both ends, and the frame before them can say how many bytes follow.
#pragma once

#include "m2n_plan.hpp"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace wt::m2n {

// Where a parameter sits in the plan: its group, and its place among the group's names.
class PlanIndex {
 public:
  explicit PlanIndex(const Plan& plan);
  struct Entry {
    std::size_t group = 0, member = 0;
  };
  const Entry* find(const std::string& name) const;
  std::size_t size() const { return entries_.size(); }
  // Transfer::in_place of the group's piece, worked out once here rather than every round.
  bool in_place(std::size_t group, std::size_t piece) const { return in_place_[group][piece]; }

 private:
  std::unordered_map<std::string, Entry> entries_;
  std::vector<std::vector<bool>> in_place_;  // per group, per piece
};

struct Transfer {
  std::size_t param = 0;  // index in the round's parameter list
  const Piece* piece = nullptr;
  int peer = 0;  // the worker rank (a send) or the trainer rank (a receive)
  uint64_t bytes = 0;
  // By the plan's shapes alone (so both ends agree): the piece's bytes lie back to back in the
  // full tensor (so in any slice of it a trainer rank holds, if compact) and in the worker
  // rank's TP slice.
  bool in_place = false;
};

// `names`: the round's parameters in order, each one the index finds. Pieces of no bytes are left
// out on both sides.
std::vector<Transfer> sends_of(const Plan& plan, const PlanIndex& index,
                               const std::vector<std::string>& names, int trainer_rank);
std::vector<Transfer> receives_of(const Plan& plan, const PlanIndex& index,
                                  const std::vector<std::string>& names, int worker_rank);

// How a pair's pieces travel: consecutive pieces of one pair under kCoalesceBelow bytes share one
// message (up to kMessageBytes), so a round of many small pieces (norms, biases, FSDP tiles cut
// by TP) costs a few messages per pair instead of one each; a larger piece is a message of its
// own, moved in place where its bytes lie back to back. Coalescing costs a copy at each end, so a
// piece of kInPlaceAlone bytes or more that the plan says lies back to back at both ends (see
// Transfer::in_place) goes alone too: at a 1 MiB threshold alone, the 0.8 MB row halves of a
// 1 GB model's attention weights were packed and unpacked instead of moved in place, and dim-0
// rounds took 40% longer; at 64 KiB alone, the 1 T layout's FSDP tiles needed 100× the messages.
// Both ends group a pair's pieces, the same ones in the same order (the frame's digest checks
// that), alike.
constexpr uint64_t kCoalesceBelow = uint64_t{1} << 20;
constexpr uint64_t kInPlaceAlone = uint64_t{256} << 10;
constexpr uint64_t kMessageBytes = uint64_t{16} << 20;
// Bytes of packed messages one side keeps in flight at most (beyond a single larger message):
// before packing or posting more, it waits for its oldest. Both sides take their messages in one
// order (by their first piece: parameter, worker rank, piece), so the earliest unfinished message
// is always posted at both ends and the round cannot deadlock on the bound.
constexpr uint64_t kInFlightBytes = uint64_t{256} << 20;

struct Message {
  int peer = 0;
  std::vector<std::size_t> transfers;  // indices into the side's transfer list, in pair order
  uint64_t bytes = 0;
};
// The messages of one side's transfers (sends_of or receives_of), in the order of their first
// transfer.
std::vector<Message> messages_of(const std::vector<Transfer>& transfers, std::size_t peers);

// Per peer (0 .. peers-1): a digest of what the pair moves in a round, in order (each piece's
// parameter name, box and bytes). The frame carries it: two ends that would pair different pieces
// (an update listing the tensors in another order, a different plan) refuse before a byte moves.
std::vector<uint64_t> pair_digests(const std::vector<Transfer>& transfers,
                                   const std::vector<std::string>& names, std::size_t peers);

}  // namespace wt::m2n
