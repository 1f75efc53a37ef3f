#include "m2n_schedule.hpp"

#include "box_copy.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstdint>

namespace wt::m2n {

namespace {

bool in_place_by_plan(const GroupPlan& g, const Piece& p, int tensor_parallel) {
  if (!box_is_contiguous(g.shape, p.box.lo, p.box.hi)) return false;
  const Box needed = needed_box(g.shape, g.tp_dim, tensor_parallel, p.tp_rank);
  std::vector<int64_t> shape(g.shape.size()), lo = p.box.lo, hi = p.box.hi;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    shape[d] = needed.hi[d] - needed.lo[d];
    lo[d] -= needed.lo[d];
    hi[d] -= needed.lo[d];
  }
  return box_is_contiguous(shape, lo, hi);
}

}  // namespace

PlanIndex::PlanIndex(const Plan& plan) {
  in_place_.resize(plan.groups.size());
  for (std::size_t g = 0; g < plan.groups.size(); ++g) {
    const GroupPlan& group = plan.groups[g];
    for (std::size_t m = 0; m < group.names.size(); ++m)
      entries_.emplace(group.names[m], Entry{g, m});
    for (const Piece& p : group.pieces)
      in_place_[g].push_back(in_place_by_plan(group, p, plan.inference.tensor_parallel));
  }
}

const PlanIndex::Entry* PlanIndex::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

std::vector<Transfer> sends_of(const Plan& plan, const PlanIndex& index,
                               const std::vector<std::string>& names, int trainer_rank) {
  const int tp = plan.inference.tensor_parallel, replicas = plan.inference.replicas;
  // Per group and tp rank, the pieces this rank holds (only a holder ever sends a piece): at 256
  // FSDP ranks a rank holds about 1/256 of them, and looking at the others for every worker rank
  // and every member took seconds.
  std::vector<std::vector<std::vector<std::size_t>>> held(plan.groups.size());
  for (std::size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const GroupPlan& g = plan.groups[gi];
    held[gi].resize(static_cast<std::size_t>(tp));
    for (std::size_t pi = 0; pi < g.pieces.size(); ++pi) {
      const Piece& p = g.pieces[pi];
      if (std::binary_search(p.holders.begin(), p.holders.end(), trainer_rank))
        held[gi][static_cast<std::size_t>(p.tp_rank)].push_back(pi);
    }
  }
  std::vector<Transfer> out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto* e = index.find(names[i]);
    const GroupPlan& g = plan.groups[e->group];
    for (int w = 0; w < plan.inference.worker_ranks(); ++w)
      for (std::size_t pi : held[e->group][static_cast<std::size_t>(w % tp)]) {
        const Piece& p = g.pieces[pi];
        if (Plan::sender(p, e->member, replicas, w / tp) != trainer_rank) continue;
        const uint64_t n = piece_bytes(p, g.dtype);
        if (n > 0) out.push_back({i, &p, w, n, index.in_place(e->group, pi)});
      }
  }
  return out;
}

std::vector<Transfer> receives_of(const Plan& plan, const PlanIndex& index,
                                  const std::vector<std::string>& names, int worker_rank) {
  const int tp = plan.inference.tensor_parallel, replicas = plan.inference.replicas;
  std::vector<Transfer> out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto* e = index.find(names[i]);
    const GroupPlan& g = plan.groups[e->group];
    for (const Piece& p : g.pieces) {
      if (p.tp_rank != worker_rank % tp) continue;
      const uint64_t n = piece_bytes(p, g.dtype);
      if (n > 0)
        out.push_back({i, &p, Plan::sender(p, e->member, replicas, worker_rank / tp), n,
                       index.in_place(e->group, static_cast<std::size_t>(&p - g.pieces.data()))});
    }
  }
  return out;
}

std::vector<Message> messages_of(const std::vector<Transfer>& transfers, std::size_t peers) {
  std::vector<Message> out;
  constexpr std::size_t kNone = SIZE_MAX;
  std::vector<std::size_t> open(peers, kNone);  // per peer: the message small pieces join
  for (std::size_t i = 0; i < transfers.size(); ++i) {
    const Transfer& t = transfers[i];
    std::size_t& o = open[static_cast<std::size_t>(t.peer)];
    if (t.bytes >= kCoalesceBelow || (t.in_place && t.bytes >= kInPlaceAlone)) {
      o = kNone;  // the pair's next small piece starts a new message: pair order is kept
      out.push_back({t.peer, {i}, t.bytes});
      continue;
    }
    if (o == kNone || out[o].bytes + t.bytes > kMessageBytes) {
      o = out.size();
      out.push_back({t.peer, {}, 0});
    }
    out[o].transfers.push_back(i);
    out[o].bytes += t.bytes;
  }
  return out;
}

std::vector<uint64_t> pair_digests(const std::vector<Transfer>& transfers,
                                   const std::vector<std::string>& names, std::size_t peers) {
  std::vector<uint64_t> d(peers, 0);
  for (const Transfer& t : transfers) {
    uint64_t& h = d[static_cast<std::size_t>(t.peer)];
    const std::string& n = names[t.param];
    h = XXH3_64bits_withSeed(n.data(), n.size(), h);
    h = XXH3_64bits_withSeed(t.piece->box.lo.data(), t.piece->box.lo.size() * sizeof(int64_t), h);
    h = XXH3_64bits_withSeed(t.piece->box.hi.data(), t.piece->box.hi.size() * sizeof(int64_t), h);
    h = XXH3_64bits_withSeed(&t.bytes, sizeof t.bytes, h);
  }
  return d;
}

}  // namespace wt::m2n
