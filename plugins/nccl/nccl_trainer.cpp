#include "nccl_trainer.hpp"

#include "../common/param_list.hpp"
#include "packed_chunks.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/tensor_layout.hpp>

#include <cstring>

namespace wt::nccl {

using sdk::fail;

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  return nlohmann::json(s).dump();
}

// The tensor iteration yields must be the one metadata() declared, item for item (reference §5.5).
void check_against(const ParamMeta& declared, const wt_tensor& t, std::size_t i) {
  const DLTensor& d = t.tensor;
  std::vector<int64_t> shape(d.shape, d.shape + d.ndim);
  if ((t.name ? declared.name != t.name : true) || !(declared.dtype == d.dtype) ||
      declared.shape != shape)
    fail(WT_ERR_INVALID_ARGUMENT,
         "WeightSource metadata() disagrees with iteration at index {}: declared '{}' {} {}, got "
         "'{}' {} {}",
         i, declared.name, torch_name(declared.dtype), shape_text(declared.shape),
         t.name ? t.name : "", torch_name(d.dtype), shape_text(shape));
  if (d.device.device_type == kDLCUDA)
    fail(WT_ERR_UNSUPPORTED,
         "tensor '{}' is in CUDA memory: this nccl backend moves host memory (over Gloo); the "
         "NCCL path for CUDA memory is not in this version",
         declared.name);
}

}  // namespace

NcclTrainer::NcclTrainer(const sdk::TrainerContext& context, const NcclInitInfo& info)
    : log_(context.host, "[nccl] "),
      info_(info),
      client_(context.client),
      source_(context.source),
      sender_(info.rendezvous.rank == 0) {
  if (!source_.valid()) fail(WT_ERR_INVALID_ARGUMENT, "the nccl backend requires a weight source");
  if (!sender_) return;  // no endpoint, no RPC
  plugins::BroadcastGroup::Options o;
  o.master_address = info.rendezvous.master_address;
  o.master_port = static_cast<int>(info.rendezvous.master_port);
  o.rank = 0;
  o.world_size = static_cast<int>(info.rendezvous.world_size);
  o.rendezvous_timeout = std::chrono::seconds(info.rendezvous_timeout_s);
  o.transfer_timeout = std::chrono::seconds(info.transfer_timeout_s);
  // The workers join inside init_weight_transfer_engine, so it runs beside our own join.
  auto rpc = std::make_unique<plugins::AsyncRpc>(
      [this, text = info.worker_init_info().dump()] { client_.init_weight_transfer_engine(text); });
  try {
    group_ = std::make_unique<plugins::BroadcastGroup>(o);
  } catch (const sdk::Error& e) {
    // An inference-side refusal says more than "the workers never came": prefer it.
    if (rpc->done()) rpc->wait(aborted_);
    parked_.push_back(std::move(rpc));
    throw;
  }
  rpc->wait(aborted_);
  log_.debug("trainer ready: group of {} formed at {}:{}", o.world_size, o.master_address,
             o.master_port);
}

NcclTrainer::~NcclTrainer() = default;

void NcclTrainer::abort() {
  aborted_ = true;
  std::lock_guard<std::mutex> l(group_mu_);
  if (group_) group_->abort();
}

void NcclTrainer::send_weights(const sdk::SendArgs& args) {
  if (aborted_) fail(WT_ERR_ABORTED, "the nccl trainer engine was aborted");
  if (!args.patches.empty())
    fail(WT_ERR_INVALID_ARGUMENT, "nccl is a full-resync backend: send_weights takes no patches");
  const auto meta = source_.metadata();
  auto pass = source_.begin();
  if (!sender_) {  // drives this rank's part of the sender's iteration, and nothing else
    wt_tensor t{};
    while (pass.next(&t)) {
    }
    return;
  }
  if (group_ == nullptr || group_->broken())
    fail(WT_ERR_STATE, "the nccl group broke in an earlier round; create the trainer engine again");
  collective_started_ = false;
  client_.start_weight_update();
  auto update = plugins::describe_params(meta);
  auto rpc = std::make_unique<plugins::AsyncRpc>(
      [this, text = update.dump()] { client_.update_weights(text); });
  try {
    // A refusal that already arrived fails the round before broadcasting to a peer that will
    // never come (reference §5.4, step 4).
    if (rpc->done()) rpc->wait(aborted_);
    broadcast_round(pass, meta);
    rpc->wait(aborted_);
  } catch (...) {
    parked_.push_back(std::move(rpc));  // never joined here: it may be blocked for good
    // Once a collective began, the peers' collectives no longer line up: the group is done.
    if (collective_started_) {
      std::lock_guard<std::mutex> l(group_mu_);
      group_.reset();
    }
    throw;
  }
  client_.finish_weight_update(args.weight_version);
}

void NcclTrainer::broadcast_round(sdk::SourceRef::Pass& pass, const std::vector<ParamMeta>& meta) {
  std::vector<uint64_t> sizes;
  for (const auto& p : meta) {
    uint64_t n = 0;
    if (!checked_nbytes(p.shape.data(), static_cast<int32_t>(p.shape.size()), p.dtype, &n))
      fail(WT_ERR_INVALID_ARGUMENT,
           "WeightSource metadata() declares '{}' with a negative shape or more bytes than 64 "
           "bits can count",
           p.name);
    sizes.push_back(n);
  }
  const auto chunks =
      info_.packed ? packed_chunks(sizes, static_cast<uint64_t>(info_.packed_buffer_size_bytes))
                   : std::vector<Chunk>{};
  std::size_t chunk = 0;
  uint64_t used = 0;
  std::vector<unsigned char> contiguous;  // a non-compact tensor, made compact
  wt_tensor t{};
  std::size_t i = 0;
  for (; pass.next(&t); ++i) {
    if (aborted_) fail(WT_ERR_ABORTED, "the nccl trainer engine was aborted");
    if (i >= meta.size())
      fail(WT_ERR_INVALID_ARGUMENT,
           "WeightSource yielded more parameters than metadata() declared ({}); first extra is "
           "'{}'",
           meta.size(), t.name ? t.name : "");
    check_against(meta[i], t, i);
    const auto* src = static_cast<const unsigned char*>(t.tensor.data) + t.tensor.byte_offset;
    if (!is_compact(t.tensor)) {
      contiguous.resize(sizes[i]);
      copy_to_contiguous(contiguous.data(), t.tensor, sizes[i]);
      src = contiguous.data();
    }
    collective_started_ = true;
    if (!info_.packed) {
      group_->broadcast(const_cast<unsigned char*>(src), sizes[i], 0,
                        "broadcast of '" + meta[i].name + "'");
      continue;
    }
    if (packed_.size() < chunks[chunk].bytes) packed_.resize(chunks[chunk].bytes);
    std::memcpy(packed_.data() + used, src, sizes[i]);
    used += sizes[i];
    if (i + 1 == chunks[chunk].last) {
      group_->broadcast(packed_.data(), used, 0,
                        "broadcast of packed chunk " + std::to_string(chunk + 1) + " of " +
                            std::to_string(chunks.size()));
      ++chunk;
      used = 0;
    }
  }
  if (i < meta.size())
    fail(WT_ERR_INVALID_ARGUMENT,
         "WeightSource yielded {} parameters but metadata() declared {}; the worker is waiting for "
         "the rest",
         i, meta.size());
}

}  // namespace wt::nccl
