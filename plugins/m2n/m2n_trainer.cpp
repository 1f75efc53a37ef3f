#include "m2n_trainer.hpp"

#include <atomic>

#include "../common/device_bytes.hpp"
#include "../common/domains.hpp"
#include "../common/gloo_mesh.hpp"
#include "../common/nccl_communicator.hpp"
#include "../common/round_bracket.hpp"
#include "../common/session_keys.hpp"
#include "../common/session_secret.hpp"
#include "../common/tcp_store.hpp"
#include "block_fp8_layout.hpp"
#include "box_copy.hpp"
#include "engine_layout.hpp"
#include "fp8_sender.hpp"
#include "m2n_holdings.hpp"
#include "m2n_wire.hpp"
#include "nccl_transfers.hpp"
#include "pair_transfers.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/parallel_copy.hpp>
#include <wt/sdk/prefault.hpp>
#include <wt/sdk/rank_keys.hpp>
#include <wt/sdk/tensor_layout.hpp>

#include <unistd.h>

namespace wt::m2n {

using sdk::fail;

namespace {

// The init info's wire_dtype and fp8_scales, as the trainer ranks compare them.
std::string wire_form(const M2nInitInfo& info) {
  return !info.block_fp8 ? "as-held" : info.ue8m0 ? "float8_e4m3fn/ue8m0" : "float8_e4m3fn/fp32";
}

bool same_model(const std::vector<ParamMeta>& a, const std::vector<ParamMeta>& b,
                std::string* first) {
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const bool same = i < a.size() && i < b.size() && a[i].name == b[i].name &&
                      a[i].dtype == b[i].dtype && a[i].shape == b[i].shape &&
                      a[i].shard_dim == b[i].shard_dim && a[i].shard_offset == b[i].shard_offset &&
                      a[i].shard_length == b[i].shard_length;
    if (!same) {
      *first = i < a.size() ? a[i].name : b[i].name;
      return false;
    }
  }
  return true;
}

}  // namespace

M2nTrainer::M2nTrainer(const sdk::TrainerContext& context, const M2nInitInfo& info)
    : log_(context.host, "[m2n] "),
      info_(info),
      client_(context.client),
      source_(context.source),
      rank_(context.group.rank()),
      ranks_(context.group.size()),
      cuda_device_(info.cuda_device()) {
  if (!source_.valid()) fail(WT_ERR_INVALID_ARGUMENT, "the m2n backend requires a weight source");
  if (info.rendezvous.rank != rank_)
    fail(WT_ERR_INVALID_ARGUMENT,
         "the init info says rank {}, but this process is rank {} of its trainer group of {}: m2n "
         "plans with the group's ranks",
         info.rendezvous.rank, rank_, ranks_);
  if (info.block_fp8 && cuda_device_ >= 0)  // before the device or any rank is reached
    sdk::fail_field("wire_dtype", WT_ERR_UNSUPPORTED,
                    "block FP8 on the wire quantizes host memory; on CUDA memory (device "
                    "\"cuda:{}\") it is not built yet: leave wire_dtype as-held",
                    cuda_device_);
  declare_model();
  plugins::CommunicatorOptions o = mesh_options(info);
  std::unique_ptr<plugins::TcpStoreServer> store;
  const Gathered gathered = gather(context.group, o, store);
  compile(gathered.per_rank, info);
  connect(o, gathered.unique_id, std::move(store), info);
  uint64_t bytes = 0;
  for (auto b : pair_bytes_) bytes += b;
  log_.debug(
      "trainer rank {} of {} ready: {} piece(s) in {} message(s), {} bytes per round to {} worker "
      "rank(s)",
      rank_, ranks_, sends_.size(), messages_.size(), bytes, pair_bytes_.size());
}

void M2nTrainer::declare_model() {
  meta_ = source_.metadata();
  for (const auto& m : meta_) {
    names_.push_back(m.name);
    if (m.dtype.bits % 8 != 0 || m.dtype.bits == 0)
      fail(WT_ERR_INVALID_ARGUMENT, "parameter '{}' has a dtype of {} bits: m2n moves whole bytes",
           m.name, m.dtype.bits);
  }
}

plugins::CommunicatorOptions M2nTrainer::mesh_options(const M2nInitInfo& info) const {
  const int workers = static_cast<int>(info.worker_ranks());
  const int world = ranks_ + workers;
  if (world > plugins::kMaxWorld)
    fail(WT_ERR_INVALID_ARGUMENT,
         "{} trainer ranks and {} worker ranks make a mesh of more than {}", ranks_, workers,
         plugins::kMaxWorld);
  plugins::CommunicatorOptions o;
  o.master_address = info.rendezvous.master_address;
  o.master_port = static_cast<int>(info.rendezvous.master_port);
  o.rank = rank_;
  o.world_size = world;
  o.rendezvous_timeout = std::chrono::seconds(info.rendezvous_timeout_s);
  o.transfer_timeout = std::chrono::seconds(info.transfer_timeout_s);
  o.stall_timeout = std::chrono::seconds(info.stall_timeout_s);
  o.warn = [log = log_](const std::string& m) { log.warn("{}", m); };
  // Trainer ranks pair with every rank, workers only with trainer ranks (never with each other).
  o.pairs = plugins::MeshPairs::hubs(ranks_);
  return o;
}

M2nTrainer::Gathered M2nTrainer::gather(const sdk::GroupRef& group, plugins::CommunicatorOptions& o,
                                        std::unique_ptr<plugins::TcpStoreServer>& store) {
  nlohmann::json mine = {{"holdings", holdings_declaration(meta_, rank_, ranks_)},
                         {"wire", wire_form(info_)}};
  // CUDA: the device is reached first (a machine without a driver or a GPU fails here, saying
  // so, before any worker is told to meet this rank); then rank 0 mints the NCCL unique id every
  // rank and worker creates the communicator from (NCCL's own bootstrap; no store, no mesh).
  if (cuda_device_ >= 0) plugins::DeviceBytes(cuda_device_, 1);
  if (rank_ == 0 && cuda_device_ >= 0) {
    mine["nccl_unique_id_b64"] = plugins::NcclCommunicator::unique_id_b64();
    if (ranks_ >= 2) {  // the round signal's store: the trainer ranks' only, never a worker's
      const auto secret = plugins::SessionSecret::mint();
      signal_store_ = std::make_unique<plugins::TcpStoreServer>(
          o.master_address, o.master_port, secret,
          plugins::TcpStoreServer::Limits::for_world(ranks_), o.warn);
      mine["signal_secret"] = secret.hex();
    }
  }
  // Rank 0 on host memory: the session's secret, and the store listening before anyone is told
  // where to meet.
  if (rank_ == 0 && cuda_device_ < 0) {
    const auto secret = plugins::SessionSecret::mint();
    store = std::make_unique<plugins::TcpStoreServer>(
        o.master_address, o.master_port, secret,
        plugins::TcpStoreServer::Limits::for_mesh(o.world_size, o.pairs), o.warn);
    mine["secret"] = secret.hex();
  }
  // Every rank's holdings on every rank (the trainer group is the trainer's own processes), each
  // declared in a few hundred bytes: what it holds of the model every rank declares alike.
  Gathered out;
  const auto gathered = group.all_gather(mine.dump());
  for (std::size_t k = 0; k < gathered.size(); ++k) {
    auto j = nlohmann::json::parse(gathered[k], nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("holdings"))
      fail(WT_ERR_INVALID_ARGUMENT, "trainer rank {} gathered no holdings", k);
    out.per_rank.push_back(
        RankHoldings::from_declaration(j.at("holdings"), static_cast<int>(k), ranks_, meta_));
    // What goes on the wire is the plan's too: every rank must quantize alike.
    if (j.value("wire", std::string()) != wire_form(info_))
      fail(WT_ERR_INVALID_ARGUMENT,
           "trainer rank {} sends '{}' on the wire, this rank '{}': every rank's init info must "
           "give the same wire_dtype and fp8_scales",
           k, j.value("wire", std::string()), wire_form(info_));
    if (k == 0) {
      o.session_secret = j.value("secret", "");
      out.unique_id = j.value("nccl_unique_id_b64", "");
      if (cuda_device_ >= 0 && ranks_ >= 2)
        signal_ = std::make_unique<plugins::RoundSignal>(
            o.master_address, o.master_port,
            plugins::SessionKeys::of_secret(
                plugins::SessionSecret::from_hex(j.value("signal_secret", ""), "signal_secret"),
                rank_));
    }
  }
  return out;
}

void M2nTrainer::compile(const std::vector<RankHoldings>& per_rank, const M2nInitInfo& info) {
  const auto workers = static_cast<std::size_t>(info.worker_ranks());
  InferenceLayout inference;
  inference.tensor_parallel = static_cast<int>(info.tensor_parallel);
  inference.replicas = static_cast<int>(workers) / inference.tensor_parallel;
  Layout layout = layout_from_holdings(meta_, per_rank, inference, info.tp_rules);
  wire_meta_ = meta_;
  if (info.block_fp8) {  // each FP8 weight planned as its values and its scales
    Fp8Selection selection;
    layout = block_fp8_layout(layout, "the m2n layout", &selection);
    const auto& fp8 = selection.names;
    fp8_ = std::make_unique<Fp8Sender>(
        meta_, fp8, per_rank, rank_,
        info.ue8m0 ? plugins::fp8::ScaleFormat::kUe8m0 : plugins::fp8::ScaleFormat::kFp32);
    wire_meta_ = fp8_->wire_meta();
    log_.debug(
        "block FP8: {} weight(s) quantized on this rank, {} kept as held for TP ({}); {} "
        "bytes of FP8 buffers",
        fp8.size(), selection.kept_tp, selection.first_kept_tp, fp8_->buffer_bytes());
  }
  names_.clear();
  for (const auto& m : wire_meta_) names_.push_back(m.name);
  plan_ = compute_plan(layout);
  // What the workers will accept, checked here: a plan they would refuse fails trainer_init now,
  // naming the parameter, instead of after the rendezvous deadline.
  plan_from_json(plan_to_json(plan_), "the m2n plan this trainer made");
  // And the engine layout: what every worker composes from the plan, refused here first.
  if (!info.engine_rules.empty()) try {
      compose_engine(plan_, info.engine_rules, "init_info for backend 'm2n', engine_layout");
    } catch (const sdk::Error& e) {
      sdk::fail_field("engine_layout", e.code(), "{}", e.what());
    }
  index_ = std::make_unique<PlanIndex>(plan_);
  sends_ = sends_of(plan_, *index_, names_, rank_);
  pair_pieces_.assign(workers, 0);
  pair_bytes_.assign(workers, 0);
  pair_digests_ = pair_digests(sends_, names_, workers);
  for (const auto& t : sends_) {
    ++pair_pieces_[static_cast<std::size_t>(t.peer)];
    pair_bytes_[static_cast<std::size_t>(t.peer)] += t.bytes;
  }
  messages_ = messages_of(sends_, workers);
  compact_.clear();
  for (const auto& m : wire_meta_) compact_.push_back(compact_strides(m.local_shape()));
  table_strides_.assign(wire_meta_.size(), {});
  frame_whats_.clear();
  for (std::size_t w = 0; w < workers; ++w)
    frame_whats_.push_back(fmt::format("the round's frame to worker rank {}", w));
  copy_threads_ = default_copy_threads();
}

nlohmann::json M2nTrainer::worker_init_info(const M2nInitInfo& info,
                                            const plugins::CommunicatorOptions& o,
                                            const std::string& unique_id) const {
  nlohmann::json worker_info = {{"rank_offset", 1},
                                {"world_size", info.rendezvous.world_size},
                                {"trainer_ranks", ranks_},
                                {"wire", kWire},
                                {"plan", plan_to_json(plan_)},
                                {"plan_digest", plan_digest(plan_)},
                                {plugins::kTrainerRendezvousKey, info.rendezvous_timeout_s}};
  if (!info.engine_rules.empty())
    worker_info["engine_layout"] = engine_rules_to_json(info.engine_rules);
  if (cuda_device_ >= 0) {
    worker_info["nccl_unique_id_b64"] = unique_id;
  } else {
    worker_info["master_address"] = o.master_address;
    worker_info["master_port"] = o.master_port;
    // Each worker its own key only (the fan-out client and wt serve split the field per rank):
    // worker offset o is mesh rank ranks_ + o - 1.
    worker_info[sdk::kRankKeysField] =
        plugins::rank_keys_json(plugins::SessionSecret::from_hex(o.session_secret, "secret"),
                                static_cast<int>(info.worker_ranks()), ranks_);
  }
  return worker_info;
}

void M2nTrainer::connect(plugins::CommunicatorOptions o, const std::string& unique_id,
                         std::unique_ptr<plugins::TcpStoreServer> store, const M2nInitInfo& info) {
  // The workers join inside init_weight_transfer_engine, so rank 0 runs it beside its own join.
  std::unique_ptr<plugins::AsyncRpc> rpc;
  if (rank_ == 0) {
    // Workers that refused the init never come: stop waiting for them then. The rendezvous may
    // poll this from a thread that outlives this constructor: it owns what it polls.
    auto refused = std::make_shared<std::atomic<bool>>(false);
    rpc = std::make_unique<plugins::AsyncRpc>(
        [c = client_, text = worker_init_info(info, o, unique_id).dump()] {
          c.init_weight_transfer_engine(text);
        },
        &aborted_, [refused] { *refused = true; });
    o.give_up = [refused] { return refused->load(); };
  }
  try {
    if (cuda_device_ >= 0) {
      if (unique_id.empty())
        fail(WT_ERR_INVALID_ARGUMENT, "trainer rank 0 gathered no NCCL unique id");
      auto comm = std::make_unique<plugins::NcclCommunicator>(unique_id, rank_, o.world_size,
                                                              cuda_device_, o.rendezvous_timeout,
                                                              o.transfer_timeout, &aborted_);
      transfers_ = std::make_unique<NcclTransfers>(std::move(comm), o.transfer_timeout);
    } else {
      transfers_ = std::make_unique<PairTransfers>(
          plugins::form_gloo_mesh(o, rank_ == 0 ? std::move(store) : nullptr), o.transfer_timeout,
          o.stall_timeout);
      // A trainer rank that gives up a round (rank 0's start refused, a source that failed)
      // closes its pairs; the others may be waiting only on workers that never started.
      for (int k = 0; k < ranks_; ++k)
        if (k != rank_) transfers_->end_with(k);
    }
  } catch (const sdk::Error&) {
    if (rpc) {
      if (rpc->done()) rpc->wait(aborted_);  // the inference side's refusal says more
      client_.abandon_calls();  // a receiver that stopped answering holds the init call
      parked_.push_back(std::move(rpc));
    }
    throw;
  }
  if (rpc) rpc->wait(aborted_);
}

M2nTrainer::~M2nTrainer() = default;

void M2nTrainer::abort() {
  aborted_.abort();
  if (transfers_) transfers_->abort();
}

void M2nTrainer::send_weights(const sdk::SendArgs& args) {
  if (aborted_.aborted()) fail(WT_ERR_ABORTED, "the m2n trainer engine was aborted");
  if (!args.patches.empty())
    fail(WT_ERR_INVALID_ARGUMENT, "m2n is a full-resync backend: send_weights takes no patches");
  if (transfers_->broken())
    fail(WT_ERR_STATE, "the m2n mesh broke in an earlier round; create the trainer engine again");
  // Whatever fails this round on this rank (the start call, the source, a transfer) closes the
  // pairs (Gloo) or raises the round signal (NCCL), so every other rank and worker stops at once
  // instead of at its deadline; a rank that hears another rank's fate aborts its transfers.
  const uint32_t round = round_++;
  std::unique_ptr<plugins::RoundSignal::Watch> watch;
  if (signal_) watch = signal_->watch(round, [this](const std::string&) { transfers_->abort(); });
  try {
    run_round(args, round, watch.get());
  } catch (...) {
    std::string fate = watch ? watch->fate() : std::string();
    // Told to the others; a rank that ended the round first is the round's fate.
    if (signal_ && fate.empty() && !aborted_.aborted())
      fate = signal_->raise(round, sdk::message_of(std::current_exception()));
    transfers_->discard();
    // Aborted here because another rank ended the round: that rank's reason is the round's.
    if (!fate.empty() && !aborted_.aborted()) throw sdk::Error(WT_ERR_REMOTE, fate);
    throw;
  }
}

void M2nTrainer::run_round(const sdk::SendArgs& args, uint32_t round,
                           const plugins::RoundSignal::Watch* watch) {
  std::string first;
  if (!same_model(source_.metadata(), meta_, &first))
    fail(WT_ERR_INVALID_ARGUMENT,
         "the weight source declares another model than at trainer_init (first difference: "
         "'{}'): the m2n plan is fixed then; create the trainer engine again",
         first);
  auto pass = source_.begin();
  std::vector<wt_tensor> tensors;
  tensors.reserve(meta_.size());
  for (wt_tensor t{}; pass.next(&t); t = wt_tensor{}) {
    if (tensors.size() >= meta_.size())
      fail(WT_ERR_INVALID_ARGUMENT, "the weight source yields more than the {} tensors declared",
           meta_.size());
    const DLDevice d = t.tensor.device;
    if (cuda_device_ < 0 && d.device_type != kDLCPU && d.device_type != kDLCUDAHost)
      fail(WT_ERR_INVALID_ARGUMENT,
           "tensor '{}' is not in host memory, but this m2n engine moves host memory (device "
           "\"cpu\"); set the init info's device to \"cuda:{}\"",
           meta_[tensors.size()].name, d.device_id);
    if (cuda_device_ >= 0 && (d.device_type != kDLCUDA || d.device_id != cuda_device_))
      fail(WT_ERR_INVALID_ARGUMENT,
           "tensor '{}' is not on cuda:{}, the device this m2n engine was made for",
           meta_[tensors.size()].name, cuda_device_);
    tensors.push_back(t);
  }
  if (tensors.size() != meta_.size())
    fail(WT_ERR_INVALID_ARGUMENT, "the weight source yielded {} tensors, its metadata declares {}",
         tensors.size(), meta_.size());
  // CUDA: the producer's kernels are done before NCCL reads (its stream, or the device).
  if (cuda_device_ >= 0) plugins::wait_stream(cuda_device_, args.stream);
  // The first round's table and staging (faulted in: a loaded machine has taken seconds per GB),
  // and source memory not mapped yet (a checkpoint file read from disk as it is sent), before any
  // worker is told to receive: its stall deadline then counts only the transfer.
  if (cuda_device_ < 0) map_new_source_memory(tensors);
  // Block FP8: this round's FP8 values and scales, quantized here (maxima exchanged with the ranks
  // that share blocks) before any worker is told to receive.
  const std::vector<wt_tensor>& wire =
      fp8_ ? fp8_->prepare(tensors, *transfers_, round, copy_threads_, aborted_) : tensors;
  table_for(wire);
  if (rank_ != 0) {
    send_round(wire, round);
    return;
  }
  plugins::RoundBracket bracket(client_, aborted_, parked_, [this] { transfers_->abort(); });
  bracket.run(
      update_text_.text_for(wire_meta_),
      [&](plugins::RoundBracket::Round& r) {
        r.before_collective();
        send_round(wire, round);
      },
      // The other ranks' pieces of this round may still be on the wire: the mesh is done.
      [&](bool) { transfers_->discard(); }, args.weight_version, nullptr,
      [this, watch] {
        std::string why = transfers_->given_up();
        return why.empty() && watch != nullptr ? watch->fate() : why;
      });
}

void M2nTrainer::map_new_source_memory(const std::vector<wt_tensor>& tensors) {
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  mapped_.resize(tensors.size(), nullptr);
  for (std::size_t p = 0; p < tensors.size(); ++p) {
    const DLTensor& t = tensors[p].tensor;
    auto* first = static_cast<unsigned char*>(t.data) + t.byte_offset;
    if (first == mapped_[p] || !is_compact(t)) continue;  // strided views: read as they are packed
    uint64_t n = 0;
    checked_nbytes(t.shape, t.ndim, t.dtype, &n);
    const auto at = reinterpret_cast<std::uintptr_t>(first);
    const std::uintptr_t from = at / page * page;
    // Best effort: a kernel before 5.14 refuses the advice, and the pages come as they are read.
    populate(reinterpret_cast<void*>(from), static_cast<std::size_t>(at + n - from),
             kMadvPopulateRead, copy_threads_, page);
    mapped_[p] = first;
  }
}

void M2nTrainer::send_round(const std::vector<wt_tensor>& tensors, uint32_t round) {
  try {
    post_round(tensors, round);
  } catch (...) {
    transfers_->discard();  // before the frames and packed pieces they point at go
    throw;
  }
  transfers_->wait_all();
}

const RoundTable& M2nTrainer::table_for(const std::vector<wt_tensor>& tensors) {
  bool same = tabled_;
  for (std::size_t p = 0; same && p < tensors.size(); ++p) {
    const DLTensor& t = tensors[p].tensor;
    const auto& want = table_strides_[p];
    same = t.strides == nullptr ? want == compact_[p]
                                : t.ndim == static_cast<int32_t>(want.size()) &&
                                      std::equal(want.begin(), want.end(), t.strides);
  }
  if (same) return table_;
  tabled_ = false;
  for (std::size_t p = 0; p < tensors.size(); ++p) {
    const DLTensor& t = tensors[p].tensor;
    table_strides_[p] =
        t.strides == nullptr ? compact_[p] : std::vector<int64_t>(t.strides, t.strides + t.ndim);
  }
  table_ = compile_table(
      sends_, messages_, names_,
      [this](const Transfer& t) {
        return sender_geometry(t, wire_meta_[t.param], table_strides_[t.param], compact_[t.param]);
      },
      "to", "worker rank");
  const uint64_t staging = staging_bytes(table_);
  if (cuda_device_ >= 0) {
    if (device_staging_.size() < staging)
      device_staging_ = plugins::DeviceBytes(cuda_device_, staging);
  } else if (staging_.size() < staging) {
    staging_.resize(staging);
  }
  ring_.reset(staging, table_.packed_messages);
  packed_ops_.assign(table_.packed_messages, 0);
  offsets_.assign(table_.messages.size(), 0);
  bases_.assign(tensors.size(), nullptr);
  tabled_ = true;
  return table_;
}

void M2nTrainer::post_round(const std::vector<wt_tensor>& tensors, uint32_t round) {
  // Compiled (the first round, or strides that changed) before the first post starts the round's
  // deadline: at the 1 T layout's scale that takes seconds in which no byte moves.
  const RoundTable& table = table_for(tensors);
  const auto workers = pair_bytes_.size();
  frames_.resize(workers);
  for (std::size_t w = 0; w < workers; ++w)
    frames_[w] = make_frame(round, pair_pieces_[w], pair_bytes_[w], pair_digests_[w]);
  const unsigned char* frame_bytes = frames_.front().data();
  void* const stream =
      cuda_device_ >= 0 ? static_cast<NcclTransfers&>(*transfers_).stream() : nullptr;
  if (cuda_device_ >= 0) {  // NCCL sends from CUDA memory
    if (device_frames_.size() < workers * kFrameBytes)
      device_frames_ = plugins::DeviceBytes(cuda_device_, workers * kFrameBytes);
    plugins::copy_async(cuda_device_, device_frames_.data(), frames_.data(), workers * kFrameBytes,
                        stream);
    frame_bytes = device_frames_.data();
  }
  for (std::size_t w = 0; w < workers; ++w)
    transfers_->post_send(ranks_ + static_cast<int>(w), slot(round, 0),
                          frame_bytes + w * kFrameBytes, kFrameBytes, frame_whats_[w]);
  for (std::size_t p = 0; p < tensors.size(); ++p)
    bases_[p] = static_cast<unsigned char*>(tensors[p].tensor.data) + tensors[p].tensor.byte_offset;
  unsigned char* const staging = cuda_device_ >= 0 ? device_staging_.data() : staging_.data();
  ring_.reset(ring_.capacity(), table.packed_messages);
  std::size_t posted_packed = 0, waited_packed = 0;  // into packed_ops_
  // Messages [pending, i) are taken from the table but not posted yet: their packed ones hold
  // room in the staging ring. flush() packs those (a batch, several threads) and posts them all,
  // in the table's order.
  std::size_t pending = 0;
  uint64_t pending_packed = 0;
  auto flush = [&](std::size_t end) {
    batch_.clear();
    for (std::size_t k = pending; k < end; ++k) {
      const TableMessage& m = table.messages[k];
      if (!m.in_place) batch_.push_back({table.copies_of(m), staging + offsets_[k]});
    }
    if (cuda_device_ >= 0)  // queued on the transfers' stream: done before the sends read
      execute_copies_async(batch_, table.walks, bases_, CopyDirection::kPack, cuda_device_, stream);
    else
      execute_copies(batch_, table.walks, bases_, CopyDirection::kPack, copy_threads_);
    for (std::size_t k = pending; k < end; ++k) {
      const TableMessage& m = table.messages[k];
      const unsigned char* from =
          m.in_place ? bases_[m.param] + m.tensor_at : staging + offsets_[k];
      if (!m.in_place) packed_ops_[posted_packed++] = transfers_->posted();
      transfers_->post_send(ranks_ + m.peer, slot(round, m.number), from, m.bytes, m.what);
    }
    pending = end;
    pending_packed = 0;
  };
  for (std::size_t i = 0; i < table.messages.size(); ++i) {
    const TableMessage& m = table.messages[i];
    if (!m.in_place) {
      // Room in the ring, or else the pending messages posted and the oldest waited for.
      int64_t at;
      while ((at = ring_.take(m.bytes)) < 0) {
        if (pending < i) {
          flush(i);
          continue;
        }
        transfers_->wait_through(packed_ops_[waited_packed++]);
        ring_.give_back_oldest();
      }
      offsets_[i] = static_cast<uint64_t>(at);
      pending_packed += m.bytes;
    }
    // CUDA copies are queued, not made: each message goes as soon as it is taken.
    if (cuda_device_ >= 0 || pending_packed >= kParallelCopyMinBytes) flush(i + 1);
  }
  flush(table.messages.size());
}

}  // namespace wt::m2n
