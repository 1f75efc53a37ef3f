#include "m2n_worker.hpp"

#include "../common/device_bytes.hpp"
#include "../common/domains.hpp"
#include "../common/gloo_mesh.hpp"
#include "../common/nccl_communicator.hpp"
#include "../common/session_keys.hpp"
#include "box_copy.hpp"
#include "engine_layout.hpp"
#include "nccl_transfers.hpp"
#include "pair_transfers.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/parallel_copy.hpp>
#include <wt/sdk/rank_keys.hpp>
#include <wt/sdk/tensor_layout.hpp>

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <span>

namespace wt::m2n {

using sdk::fail;

M2nWorker::M2nWorker(const sdk::WorkerContext& context, const nlohmann::json& init_info)
    : log_(context.host, "[m2n] ") {
  if (context.device.device_type != kDLCPU && context.device.device_type != kDLCUDA)
    fail(WT_ERR_UNSUPPORTED, "this m2n worker moves host or CUDA memory, not device type {}",
         static_cast<int>(context.device.device_type));
  const std::string what = "init_info for backend 'm2n' (worker)";
  sdk::FieldReader r(init_info, what);
  plugins::CommunicatorOptions o;
  // Host memory: the rendezvous store and the session secret (Gloo pairs); CUDA memory: the NCCL
  // unique id trainer rank 0 minted.
  std::string unique_id;
  nlohmann::json rank_keys;
  if (r.has("nccl_unique_id_b64")) {
    unique_id = r.get_string("nccl_unique_id_b64");
    plugins::NcclCommunicator::decode_unique_id(unique_id, "nccl_unique_id_b64");
  } else {
    o.master_address = r.get_string("master_address");
    const int64_t port = r.get_int("master_port");
    if (port < 1 || port > 65535)
      sdk::fail_field("master_port", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'master_port' must be in 1..65535, got {}", what, port);
    o.master_port = static_cast<int>(port);
    rank_keys = r.raw(sdk::kRankKeysField);  // this rank's own key, read with rank_offset
  }
  const bool cuda = context.device.device_type == kDLCUDA;
  if (cuda && unique_id.empty())
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid {}: this worker keeps weights on cuda:{}, but the trainer moves host memory (no "
         "nccl_unique_id_b64): set the trainer init info's device to \"cuda:N\", or run the "
         "receiver on the CPU",
         what, context.device.device_id);
  if (!cuda && !unique_id.empty())
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid {}: this worker keeps weights in host memory, but the trainer moves CUDA memory "
         "(it sent an NCCL unique id): run the receiver on a CUDA device",
         what);
  device_ = cuda ? context.device.device_id : -1;
  stream_ = context.stream;
  const int64_t rank_offset = r.get_int("rank_offset");
  const int64_t world_size = r.get_int("world_size");
  const int64_t trainers = r.get_int("trainer_ranks");
  const nlohmann::json plan_json = r.raw("plan");
  const std::string digest = r.get_string("plan_digest");
  const int64_t wire = r.has("wire") ? r.get_int("wire") : 1;  // m2n 0.1 sent none
  const nlohmann::json engine_json =
      r.has("engine_layout") ? r.raw("engine_layout") : nlohmann::json::array();
  const auto trainer_rendezvous = plugins::read_trainer_rendezvous(r);
  r.finish();
  if (wire != kWire)
    sdk::fail_field("wire", WT_ERR_INCOMPATIBLE,
                    "invalid {}: the trainer sends m2n wire {}, this worker reads wire {} only: "
                    "use the same libwt_m2n.so version on both sides",
                    what, wire, kWire);
  if (world_size < 2 || world_size > plugins::kMaxWorld)
    sdk::fail_field("world_size", WT_ERR_INVALID_ARGUMENT,
                    "invalid {}: field 'world_size' must be in 2..{}, got {}", what,
                    plugins::kMaxWorld, world_size);
  if (rank_offset < 1 || rank_offset >= world_size)
    sdk::fail_field("rank_offset", WT_ERR_INVALID_ARGUMENT,
                    "invalid {}: rank_offset {} is not in 1..{}", what, rank_offset,
                    world_size - 1);
  if (trainers < 1 || trainers + world_size - 1 > plugins::kMaxWorld)
    sdk::fail_field("trainer_ranks", WT_ERR_INVALID_ARGUMENT,
                    "invalid {}: field 'trainer_ranks' must be in 1..{}, got {}", what,
                    plugins::kMaxWorld - (world_size - 1), trainers);
  try {
    plan_ = plan_from_json(plan_json, "m2n plan in the worker init info");
  } catch (const sdk::Error& e) {  // whatever part of it was wrong, the init info's field is "plan"
    sdk::fail_field("plan", e.code(), "{}", e.what());
  }
  if (plan_digest(plan_) != digest)
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid {}: the plan's digest is {}, but the init info says {} (altered on the way?)",
         what, plan_digest(plan_), digest);
  if (plan_.trainer_ranks != trainers)
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid {}: the plan is for {} trainer ranks, the init info says {}", what,
         plan_.trainer_ranks, trainers);
  if (plan_.inference.worker_ranks() != world_size - 1)
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid {}: the plan is for {} worker ranks ({} x TP {}), the init info's world_size {} "
         "has {}",
         what, plan_.inference.worker_ranks(), plan_.inference.replicas,
         plan_.inference.tensor_parallel, world_size, world_size - 1);
  index_ = std::make_unique<PlanIndex>(plan_);
  try {  // the engine's own parameters, composed from the plan's (no rules: the plan's own)
    engine_ = compose_engine(plan_, engine_rules_from_json(engine_json, what + ", engine_layout"),
                             what + ", engine_layout");
  } catch (const sdk::Error& e) {
    sdk::fail_field("engine_layout", e.code(), "{}", e.what());
  }
  for (const EngineTensor& t : engine_.tensors) {
    uint64_t n = element_size(t.dtype);
    for (int64_t d : t.local_shape) n *= static_cast<uint64_t>(d);
    engine_bytes_.push_back(n);
  }
  plugins::read_worker_deadlines(context, "m2n", o, trainer_rendezvous);
  worker_rank_ = static_cast<int>(rank_offset - 1);
  if (!rank_keys.is_null()) o.rank_key = plugins::own_rank_key(rank_keys, rank_offset, what);
  check_held(context.held);  // before any rank waits for this one in the mesh
  trainers_ = static_cast<int>(trainers);
  o.rank = trainers_ + worker_rank_;
  o.world_size = trainers_ + static_cast<int>(world_size - 1);
  o.pairs = plugins::MeshPairs::hubs(trainers_);  // the trainer ranks; never another worker
  o.warn = [log = log_](const std::string& m) { log.warn("{}", m); };
  if (cuda)
    transfers_ = std::make_unique<NcclTransfers>(
        std::make_unique<plugins::NcclCommunicator>(unique_id, o.rank, o.world_size, device_,
                                                    o.rendezvous_timeout, o.transfer_timeout),
        o.transfer_timeout);
  else
    transfers_ = std::make_unique<PairTransfers>(plugins::form_gloo_mesh(o, nullptr),
                                                 o.transfer_timeout, o.stall_timeout);
  // No end_with here: a trainer rank that finished its part of the last round may close its
  // pairs while the others still send. One that gives a round up closes its pairs, and the other
  // trainer ranks (which watch each other) close theirs, which ends every wait here at once.
  log_.debug("worker rank {} (tp rank {}) ready: {} parameter(s) planned from {} trainer rank(s)",
             worker_rank_, worker_rank_ % plan_.inference.tensor_parallel, index_->size(),
             trainers_);
}

M2nWorker::~M2nWorker() = default;

void M2nWorker::start() {
  std::lock_guard<std::mutex> l(mu_);
  if (active_) fail(WT_ERR_STATE, "a weight update is already active; call finish first");
  if (transfers_->broken())
    fail(WT_ERR_STATE, "the m2n mesh broke in an earlier update; initialise the engine again");
  active_ = true;
}

void M2nWorker::finish() {
  std::lock_guard<std::mutex> l(mu_);
  if (!active_) fail(WT_ERR_STATE, "finish called with no active weight update");
  active_ = false;
}

void M2nWorker::abort() {
  {
    std::lock_guard<std::mutex> l(mu_);
    active_ = false;
  }
  transfers_->abort();
}

namespace {

plugins::ParamList read_update_info(const nlohmann::json& update_info) {
  sdk::FieldReader r(update_info, "update_info for backend 'm2n'");
  auto list = plugins::read_param_list(r);
  r.finish();
  return list;
}

}  // namespace

template <typename Receive>
void M2nWorker::refusing_closes_pairs(Receive&& receive) {
  try {
    receive();
  } catch (...) {
    // A round this worker refuses, even before it posted a receive, closes its pairs: every
    // trainer rank sending to it fails at once, not at its transfer deadline (only rank 0 hears
    // the refusal on the control plane).
    transfers_->discard();
    throw;
  }
}

void M2nWorker::receive(const nlohmann::json& update_info, const sdk::LoaderRef& loader) {
  refusing_closes_pairs([&] { receive_list(read_update_info(update_info), loader); });
}

void M2nWorker::receive_text(const char* update_info, const sdk::LoaderRef& loader) {
  refusing_closes_pairs([&] {
    receive_list(*update_text_.list_of(update_info,
                                       [&](const nlohmann::json& parsed, plugins::ParamList& list) {
                                         list = read_update_info(parsed);
                                         return true;
                                       }),
                 loader);
  });
}

void M2nWorker::check_held(const std::vector<ParamMeta>& held) const {
  if (held.empty()) return;  // the host does not know yet (no model before the first round)
  std::vector<WorkerParam> params;
  params.reserve(held.size());
  for (const auto& m : held) params.push_back({m.name, m.dtype, m.shape});
  try {
    check_held_params(engine_params(engine_), params, worker_rank_,
                      worker_rank_ % plan_.inference.tensor_parallel);
  } catch (const sdk::Error& e) {
    if (engine_.composed == 0) throw;
    // A model held under other names (the trainer's, or another layout's) reads as missing.
    fail(e.code(),
         "{} (the trainer's engine_layout composes {} of the {} tensors it sends this "
         "worker)",
         e.what(), engine_.composed, engine_.tensors.size());
  }
}

void M2nWorker::check_update(const plugins::ParamList& list) const {
  for (const auto& p : list.params) {
    const auto* e = index_->find(p.name);
    if (e == nullptr)
      fail(WT_ERR_INVALID_ARGUMENT,
           "the update names '{}', which the m2n plan does not cover; nothing was received",
           p.name);
    const GroupPlan& g = plan_.groups[e->group];
    if (!(g.dtype == p.dtype) || g.shape != p.shape)
      fail(WT_ERR_INVALID_ARGUMENT,
           "the update sends '{}' as {} [{}], the m2n plan has it as {} [{}]; nothing was "
           "received",
           p.name, torch_name(p.dtype), fmt::join(p.shape, ", "), torch_name(g.dtype),
           fmt::join(g.shape, ", "));
  }
  if (list.params.size() != index_->size())
    fail(WT_ERR_INVALID_ARGUMENT,
         "the update names {} tensor(s), the m2n plan {}: every round sends every planned "
         "parameter; nothing was received",
         list.params.size(), index_->size());
}

void M2nWorker::receive_list(const plugins::ParamList& list, const sdk::LoaderRef& loader) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!active_) fail(WT_ERR_STATE, "start must be called before receive");
  }
  check_update(list);
  const Schedule& schedule = schedule_for(list);
  const auto& pieces = schedule.pieces;
  const auto& bytes = schedule.bytes;
  const auto& digests = schedule.digests;
  const auto trainers = static_cast<std::size_t>(trainers_);
  const uint32_t round = round_++;
  // The frames: every trainer rank in step and sending what the plan says, or nothing is taken.
  if (frame_whats_.size() != trainers) {
    frame_whats_.clear();
    for (std::size_t k = 0; k < trainers; ++k)
      frame_whats_.push_back(fmt::format("the round's frame from trainer rank {}", k));
  }
  auto& frames = frames_;
  frames.resize(trainers);
  unsigned char* frame_bytes = frames.front().data();
  if (device_ >= 0) {  // NCCL receives into CUDA memory
    if (device_frames_.size() < trainers * kFrameBytes)
      device_frames_ = plugins::DeviceBytes(device_, trainers * kFrameBytes);
    frame_bytes = device_frames_.data();
  }
  for (std::size_t k = 0; k < trainers; ++k)
    transfers_->post_recv(static_cast<int>(k), slot(round, 0), frame_bytes + k * kFrameBytes,
                          kFrameBytes, frame_whats_[k]);
  transfers_->wait_all();
  if (device_ >= 0) {
    void* stream = static_cast<NcclTransfers&>(*transfers_).stream();
    plugins::copy_async(device_, frames.data(), device_frames_.data(), trainers * kFrameBytes,
                        stream);
    plugins::wait_stream(device_, stream);
  }
  for (std::size_t k = 0; k < trainers; ++k) {
    const Frame want = make_frame(round, pieces[k], bytes[k], digests[k]);
    if (frames[k] != want) {
      transfers_->discard();
      const unsigned char* f = frames[k].data();
      if (std::memcmp(f, kFrameMagic, 4) != 0)
        fail(WT_ERR_REMOTE,
             "trainer rank {} sent worker rank {} something that is not an m2n frame; nothing of "
             "the round was taken",
             k, worker_rank_);
      fail(
          WT_ERR_REMOTE,
          "trainer rank {} sends round {} with {} piece(s), {} bytes (schedule {:016x}) for worker "
          "rank {}; this worker expects round {} with {} piece(s), {} bytes (schedule {:016x}) "
          "from it; nothing of it was taken",
          k, plugins::get_le(f + 4, 4), plugins::get_le(f + 8, 8), plugins::get_le(f + 16, 8),
          plugins::get_le(f + 24, 8), worker_rank_, round, pieces[k], bytes[k], digests[k]);
    }
  }
  try {
    place(list, loader);
    receive_messages(round);
    copy_ties();
    hand_over(loader);
  } catch (...) {
    transfers_->discard();  // the trainer ranks' pieces of this round will never be taken
    throw;
  }
}

const M2nWorker::Schedule& M2nWorker::schedule_for(const plugins::ParamList& list) {
  const auto& params = list.params;
  const bool same = scheduled_ && schedule_.names.size() == params.size() &&
                    std::equal(params.begin(), params.end(), schedule_.names.begin(),
                               [](const auto& p, const std::string& n) { return p.name == n; });
  if (same) return schedule_;
  scheduled_ = false;
  Schedule s;
  s.names.reserve(params.size());
  for (const auto& p : params) s.names.push_back(p.name);
  const std::vector<Transfer> receives = receives_of(plan_, *index_, s.names, worker_rank_);
  const auto trainers = static_cast<std::size_t>(trainers_);
  s.pieces.assign(trainers, 0);
  s.bytes.assign(trainers, 0);
  for (const auto& t : receives) {
    ++s.pieces[static_cast<std::size_t>(t.peer)];
    s.bytes[static_cast<std::size_t>(t.peer)] += t.bytes;
  }
  s.digests = pair_digests(receives, s.names, trainers);
  // Each parameter's TP slice, as this rank holds it: a compact tensor of its own shape.
  const int tp = plan_.inference.tensor_parallel;
  s.needed.resize(params.size());
  s.shapes.resize(params.size());
  s.strides.resize(params.size());
  s.bytes_of.resize(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const GroupPlan& g = plan_.groups[index_->find(params[i].name)->group];
    s.needed[i] = needed_box(g.shape, g.tp_dim, tp, worker_rank_ % tp);
    s.shapes[i].resize(g.shape.size());
    uint64_t n = element_size(g.dtype);
    for (std::size_t d = 0; d < g.shape.size(); ++d) {
      s.shapes[i][d] = s.needed[i].hi[d] - s.needed[i].lo[d];
      n *= static_cast<uint64_t>(s.shapes[i][d]);
    }
    s.strides[i] = compact_strides(s.shapes[i]);
    s.bytes_of[i] = n;
    const EnginePlace& at = engine_.place_of(params[i].name);
    s.engine_at.push_back({at.tensor, at.element_offset * element_size(g.dtype)});
    if (s.engine_at.back().byte_offset + n > engine_bytes_[at.tensor])  // composed wrongly
      fail(WT_ERR_INTERNAL, "parameter '{}' would lie past the end of engine tensor '{}'",
           params[i].name, engine_.tensors[at.tensor].name);
  }
  s.table = compile_table(
      receives, messages_of(receives, trainers), s.names,
      [&](const Transfer& t) {
        return receiver_geometry(t, params[t.param].dtype, s.needed[t.param], s.shapes[t.param],
                                 s.strides[t.param]);
      },
      "from", "trainer rank");
  const uint64_t staging = staging_bytes(s.table);
  if (device_ >= 0) {
    if (device_staging_.size() < staging) device_staging_ = plugins::DeviceBytes(device_, staging);
  } else if (staging_.size() < staging) {
    staging_.resize(staging);
  }
  ring_.reset(staging, s.table.packed_messages);
  buffered_.assign(s.table.packed_messages, 0);
  offsets_.assign(s.table.messages.size(), 0);
  ops_.assign(s.table.messages.size(), 0);
  places_.assign(params.size(), nullptr);
  const std::size_t tensors = engine_.tensors.size();
  engine_places_.assign(tensors, nullptr);
  offered_.assign(tensors, false);
  own_.resize(tensors);
  own_device_.resize(device_ >= 0 ? tensors : 0);
  schedule_ = std::move(s);
  scheduled_ = true;
  return schedule_;
}

void M2nWorker::place(const plugins::ParamList& list, const sdk::LoaderRef& loader) {
  const DLDevice here = device_ >= 0 ? DLDevice{kDLCUDA, device_} : DLDevice{kDLCPU, 0};
  // Where each engine tensor lands: the loader's memory where it offers some, else ours; a tied
  // name the loader keeps no memory for is the tensor it is tied to.
  for (std::size_t k = 0; k < engine_.tensors.size(); ++k) {
    const EngineTensor& t = engine_.tensors[k];
    auto dst = loader.destination(ParamMeta{t.name, t.dtype, t.local_shape});
    offered_[k] = dst && dst->device.device_type == here.device_type &&
                  dst->device.device_id == here.device_id && is_compact(*dst);
    // The parts land at offsets in the tensor asked for: one of another form would take them
    // past its end.
    if (offered_[k] && (dst->data == nullptr || !(dst->dtype == t.dtype) ||
                        dst->ndim != static_cast<int32_t>(t.local_shape.size()) ||
                        !std::equal(t.local_shape.begin(), t.local_shape.end(), dst->shape)))
      fail(WT_ERR_INVALID_ARGUMENT,
           "the host's destination for '{}' is {} [{}], not the {} [{}] asked for; nothing of the "
           "round was written",
           t.name, torch_name(dst->dtype),
           fmt::join(std::span<const int64_t>(dst->shape,
                                              static_cast<std::size_t>(std::max(dst->ndim, 0))),
                     ", "),
           torch_name(t.dtype), fmt::join(t.local_shape, ", "));
    if (offered_[k]) {
      engine_places_[k] = static_cast<unsigned char*>(dst->data) + dst->byte_offset;
    } else if (t.tied_to >= 0) {
      engine_places_[k] = nullptr;  // after the loop: the tensor it is tied to
    } else if (device_ >= 0) {
      if (own_device_[k].size() != engine_bytes_[k])
        own_device_[k] = plugins::DeviceBytes(device_, engine_bytes_[k]);
      engine_places_[k] = own_device_[k].data();
    } else {
      own_[k] = std::make_unique_for_overwrite<unsigned char[]>(engine_bytes_[k]);  // no zero fill
      engine_places_[k] = own_[k].get();
    }
  }
  for (std::size_t k = 0; k < engine_.tensors.size(); ++k)
    if (!offered_[k] && engine_.tensors[k].tied_to >= 0)
      engine_places_[k] = engine_places_[static_cast<std::size_t>(engine_.tensors[k].tied_to)];
  for (std::size_t i = 0; i < list.params.size(); ++i)
    places_[i] = engine_places_[schedule_.engine_at[i].tensor] + schedule_.engine_at[i].byte_offset;
}

void M2nWorker::copy_ties() {
  for (std::size_t k = 0; k < engine_.tensors.size(); ++k) {
    const int64_t to = engine_.tensors[k].tied_to;
    if (to < 0) continue;
    const unsigned char* from = engine_places_[static_cast<std::size_t>(to)];
    if (engine_places_[k] == from) continue;  // one tensor under two names
    if (device_ >= 0) {
      void* stream = static_cast<NcclTransfers&>(*transfers_).stream();
      plugins::copy_async(device_, engine_places_[k], from, engine_bytes_[k], stream);
      plugins::wait_stream(device_, stream);
    } else {
      std::memcpy(engine_places_[k], from, engine_bytes_[k]);
    }
  }
}

void M2nWorker::receive_messages(uint32_t round) {
  const RoundTable& table = schedule_.table;
  void* const stream = device_ >= 0 ? static_cast<NcclTransfers&>(*transfers_).stream() : nullptr;
  unsigned char* const staging = device_ >= 0 ? device_staging_.data() : staging_.data();
  ring_.reset(ring_.capacity(), table.packed_messages);
  // Packed messages received and not yet unpacked, oldest first: buffered_[unpacked, received).
  std::size_t received = 0, unpacked = 0;
  // Unpacks the oldest buffered messages, at least kParallelCopyMinBytes of them where there are
  // (a batch several threads share), once they have arrived; their room goes back to the ring.
  auto unpack_oldest = [&](bool all) {
    batch_.clear();
    uint64_t bytes = 0;
    std::size_t end = unpacked;
    while (end < received && (all || bytes < kParallelCopyMinBytes)) {
      const std::size_t k = buffered_[end++];
      const TableMessage& m = table.messages[k];
      batch_.push_back({table.copies_of(m), staging + offsets_[k]});
      bytes += m.bytes;
    }
    if (end == unpacked) return;
    transfers_->wait_through(ops_[buffered_[end - 1]]);
    if (device_ >= 0) {  // queued after the receives on the same stream; done before reuse
      execute_copies_async(batch_, table.walks, places_, CopyDirection::kUnpack, device_, stream);
      plugins::wait_stream(device_, stream);
    } else {
      execute_copies(batch_, table.walks, places_, CopyDirection::kUnpack, copy_threads_);
    }
    for (; unpacked < end; ++unpacked) ring_.give_back_oldest();
  };
  try {
    for (std::size_t i = 0; i < table.messages.size(); ++i) {
      const TableMessage& m = table.messages[i];
      unsigned char* into = nullptr;
      if (m.in_place) {
        into = places_[m.param] + m.tensor_at;
      } else {
        int64_t at;
        while ((at = ring_.take(m.bytes)) < 0) unpack_oldest(false);
        offsets_[i] = static_cast<uint64_t>(at);
        into = staging + at;
        buffered_[received++] = i;
      }
      ops_[i] = transfers_->posted();
      transfers_->post_recv(m.peer, slot(round, m.number), into, m.bytes, m.what);
    }
    transfers_->wait_all();
  } catch (...) {
    transfers_->discard();  // before the memory they point at is reused
    throw;
  }
  // Every message has arrived (wait_all forgot them: nothing is waited for again).
  batch_.clear();
  for (; unpacked < received; ++unpacked) {
    const std::size_t k = buffered_[unpacked];
    batch_.push_back({table.copies_of(table.messages[k]), staging + offsets_[k]});
  }
  if (device_ >= 0)
    execute_copies_async(batch_, table.walks, places_, CopyDirection::kUnpack, device_, stream);
  else
    execute_copies(batch_, table.walks, places_, CopyDirection::kUnpack, copy_threads_);
  if (device_ >= 0) plugins::wait_stream(device_, stream);  // every byte in place
}

void M2nWorker::hand_over(const sdk::LoaderRef& loader) {
  const DLDevice here = device_ >= 0 ? DLDevice{kDLCUDA, device_} : DLDevice{kDLCPU, 0};
  views_.clear();
  for (std::size_t k = 0; k < engine_.tensors.size(); ++k) {
    EngineTensor& t = engine_.tensors[k];
    if (offered_[k]) {
      loader.written(t.name);
      continue;
    }
    wt_tensor v{};
    v.name = t.name.c_str();
    v.tensor = DLTensor{engine_places_[k],
                        here,
                        static_cast<int32_t>(t.local_shape.size()),
                        t.dtype,
                        t.local_shape.data(),
                        nullptr,
                        0};
    views_.push_back(v);
  }
  if (views_.empty()) return;
  loader.load(views_);
  // CUDA: the consumer's copies out of our buffers are done before they go (the model's stream).
  if (device_ >= 0) plugins::wait_stream(device_, stream_);
  // A loader that copies out gets the round in memory of ours, given back now: between rounds
  // the worker holds no second copy of its slice.
  for (std::size_t k = 0; k < engine_.tensors.size(); ++k)
    if (!offered_[k]) {
      own_[k].reset();
      if (device_ >= 0) own_device_[k] = plugins::DeviceBytes();
    }
}

}  // namespace wt::m2n
