#include "nccl_trainer.hpp"

#include "../common/broadcast_pipeline.hpp"
#include "../common/domains.hpp"
#include "../common/param_list.hpp"
#include "../common/round_digests.hpp"
#include "packed_chunks.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/tensor_layout.hpp>

#include <cstring>
#include <optional>

namespace wt::nccl {

using sdk::fail;

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  return nlohmann::json(s).dump();
}

// The tensor iteration yields must be the one metadata() declared, item for item (reference §5.5),
// in the memory this engine's transport moves.
void check_against(const ParamMeta& declared, const wt_tensor& t, std::size_t i, int cuda_device) {
  const DLTensor& d = t.tensor;
  std::vector<int64_t> shape(d.shape, d.shape + d.ndim);
  if ((t.name ? declared.name != t.name : true) || !(declared.dtype == d.dtype) ||
      declared.shape != shape)
    fail(WT_ERR_INVALID_ARGUMENT,
         "WeightSource metadata() disagrees with iteration at index {}: declared '{}' {} {}, got "
         "'{}' {} {}",
         i, declared.name, torch_name(declared.dtype), shape_text(declared.shape),
         t.name ? t.name : "", torch_name(d.dtype), shape_text(shape));
  if (cuda_device < 0 && d.device.device_type == kDLCUDA)
    fail(WT_ERR_INVALID_ARGUMENT,
         "tensor '{}' is in CUDA memory, but this nccl engine moves host memory (device \"cpu\"); "
         "set the init info's device to \"cuda:{}\"",
         declared.name, d.device.device_id);
  if (cuda_device >= 0 && (d.device.device_type != kDLCUDA || d.device.device_id != cuda_device))
    fail(WT_ERR_INVALID_ARGUMENT,
         "tensor '{}' is not on cuda:{}, the device this nccl engine was made for", declared.name,
         cuda_device);
}

}  // namespace

NcclTrainer::NcclTrainer(const sdk::TrainerContext& context, const NcclInitInfo& info,
                         plugins::CommunicatorFactory make_communicator)
    : log_(context.host, "[nccl] "),
      info_(info),
      cuda_device_(info.cuda_device()),
      client_(context.client),
      source_(context.source),
      sender_(info.rendezvous.rank == 0) {
  if (!source_.valid()) fail(WT_ERR_INVALID_ARGUMENT, "the nccl backend requires a weight source");
  if (!sender_) return;  // no endpoint, no RPC
  group_ = plugins::open_sender_domain(
      info.sender_domain(log_), client_,
      [&](const auto& unique_id) { return info.worker_init_info(unique_id); },
      std::move(make_communicator), parked_, aborted_);
  log_.debug("trainer ready: group of {} formed ({})", info.rendezvous.world_size, info.device);
}

NcclTrainer::~NcclTrainer() = default;

void NcclTrainer::abort() {
  aborted_.abort();
  std::lock_guard<std::mutex> l(group_mu_);
  if (group_) group_->abort();
}

void NcclTrainer::send_weights(const sdk::SendArgs& args) {
  if (aborted_.aborted()) fail(WT_ERR_ABORTED, "the nccl trainer engine was aborted");
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
  group_->take_digests();  // the round's own only
  plugins::RoundBracket bracket(client_, aborted_, parked_, [this] {
    std::lock_guard<std::mutex> l(group_mu_);
    if (group_) group_->abort();
  });
  bracket.run(
      update_text_.text_for(meta),
      [&](plugins::RoundBracket::Round& round) {
        // CUDA: the producer's kernels are done before NCCL reads (its stream, or the device).
        if (cuda_device_ >= 0) plugins::wait_stream(cuda_device_, args.stream);
        broadcast_round(pass, meta, round);
      },
      [&](bool collective_started) {
        // Once a collective began, the peers' collectives no longer line up: the group is done.
        if (collective_started) {
          std::lock_guard<std::mutex> l(group_mu_);
          plugins::retire_broken(group_, retired_);
        }
      },
      args.weight_version, [this] { return plugins::round_verification(group_.get()); });
}

unsigned char* NcclTrainer::packed_buffer(std::size_t slot, uint64_t bytes) {
  if (cuda_device_ < 0) {
    if (host_buffers_.size() <= slot) host_buffers_.resize(slot + 1);
    if (host_buffers_[slot].size() < bytes) host_buffers_[slot].resize(bytes);
    return host_buffers_[slot].data();
  }
  if (device_buffers_.size() <= slot) device_buffers_.resize(slot + 1);
  if (device_buffers_[slot].size() < bytes)
    device_buffers_[slot] = plugins::DeviceBytes(cuda_device_, bytes);
  return device_buffers_[slot].data();
}

void NcclTrainer::copy_in(unsigned char* dst, const unsigned char* src, std::size_t n) {
  if (cuda_device_ < 0)
    std::memcpy(dst, src, n);
  else  // on the collectives' stream: ordered before the chunk's broadcast
    plugins::copy_async(cuda_device_, dst, src, n, group_->stream());
}

void NcclTrainer::broadcast_round(sdk::SourceRef::Pass& pass, const std::vector<ParamMeta>& meta,
                                  plugins::RoundBracket::Round& round) {
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
  const std::size_t slots = static_cast<std::size_t>(info_.packed_num_buffers);
  std::optional<plugins::BroadcastPipeline> pipeline;
  if (info_.packed) pipeline.emplace(*group_, slots);
  // A streaming source frees each tensor when asked for the next (WT_CAP_STREAMING_SOURCE): no
  // chunk is then broadcast from the source's memory, and a CUDA copy is done before moving on.
  const bool streaming = source_.releases_each_tensor();
  std::size_t chunk = 0, direct_chunks = 0;
  uint64_t used = 0;
  unsigned char* buffer = nullptr;        // the chunk's packing buffer, once needed
  const unsigned char* direct = nullptr;  // the chunk's bytes in the source, while adjacent
  // A chunk's buffer, once its previous broadcast is done.
  auto chunk_buffer = [&](std::size_t c) {
    pipeline->wait(c % slots);
    return packed_buffer(c % slots, chunks[c].bytes);
  };
  wt_tensor t{};
  std::size_t i = 0;
  for (; pass.next(&t); ++i) {
    if (aborted_.aborted()) fail(WT_ERR_ABORTED, "the nccl trainer engine was aborted");
    if (i >= meta.size())
      fail(WT_ERR_INVALID_ARGUMENT,
           "WeightSource yielded more parameters than metadata() declared ({}); first extra is "
           "'{}'",
           meta.size(), t.name ? t.name : "");
    check_against(meta[i], t, i, cuda_device_);
    const auto* src = static_cast<const unsigned char*>(t.tensor.data) + t.tensor.byte_offset;
    if (!is_compact(t.tensor)) {
      if (cuda_device_ >= 0)
        fail(WT_ERR_INVALID_ARGUMENT,
             "tensor '{}' is a strided view of CUDA memory: make it contiguous before sending",
             meta[i].name);
      contiguous_.resize(sizes[i]);
      copy_to_contiguous(contiguous_.data(), t.tensor, sizes[i]);
      src = contiguous_.data();
    }
    round.before_collective();
    if (!info_.packed) {
      group_->broadcast(const_cast<unsigned char*>(src), sizes[i], meta[i].dtype, 0,
                        "broadcast of '" + meta[i].name + "'");
      continue;
    }
    // A chunk whose tensors lie back to back in the source's memory (a checkpoint mapped from
    // one file, one flat parameter buffer) is broadcast from there, without packing it: the
    // source keeps its tensors valid until the pass ends, after the last broadcast. Otherwise
    // the tensors seen so far are packed into the chunk's buffer, and the rest as they come.
    const bool starts = used == 0;
    const bool adjacent = !streaming && is_compact(t.tensor) &&
                          (starts || (direct != nullptr && src == direct + used));
    if (starts && adjacent) direct = src;
    if (!adjacent && direct != nullptr) {  // the run broke: pack what it covered
      buffer = chunk_buffer(chunk);
      copy_in(buffer, direct, used);
      direct = nullptr;
    }
    if (direct == nullptr) {
      if (buffer == nullptr) buffer = chunk_buffer(chunk);
      copy_in(buffer + used, src, sizes[i]);
      if (streaming && cuda_device_ >= 0) plugins::wait_stream(cuda_device_, group_->stream());
    }
    used += sizes[i];
    if (i + 1 == chunks[chunk].last) {
      pipeline->submit(chunk % slots,
                       direct != nullptr ? const_cast<unsigned char*>(direct) : buffer, used,
                       kBytes,
                       "broadcast of packed chunk " + std::to_string(chunk + 1) + " of " +
                           std::to_string(chunks.size()));
      direct_chunks += direct != nullptr;
      ++chunk;
      used = 0;
      buffer = nullptr;
      direct = nullptr;
    }
  }
  if (i < meta.size())
    fail(WT_ERR_INVALID_ARGUMENT,
         "WeightSource yielded {} parameters but metadata() declared {}; the worker is waiting for "
         "the rest",
         i, meta.size());
  if (pipeline) {
    pipeline->drain();
    log_.debug("round: {} of {} packed chunk(s) broadcast from the source's memory", direct_chunks,
               chunks.size());
  }
}

}  // namespace wt::nccl
