#include "nccl_worker.hpp"

#include "../common/broadcast_pipeline.hpp"
#include "../common/domains.hpp"
#include "../common/param_list.hpp"
#include "packed_chunks.hpp"

#include <wt/sdk/tensor_layout.hpp>

#include <cstring>
#include <functional>
#include <optional>

namespace wt::nccl {

using sdk::fail;

NcclWorker::NcclWorker(const sdk::WorkerContext& context, const nlohmann::json& init_info,
                       plugins::CommunicatorFactory make_communicator)
    : log_(context.host, "[nccl] "), device_(context.device), stream_(context.stream) {
  const auto init = plugins::read_worker_init(context, init_info, "nccl");
  packed_ = init.packed;
  buffer_bytes_ = init.buffer_bytes;
  num_buffers_ = init.num_buffers;
  group_ = plugins::join_worker_domain(init, device_, std::move(make_communicator));
  session_.expect_digests(init.round_digests);
  log_.debug("worker ready: rank {} of {}, packed={}", init.options.rank, init.options.world_size,
             packed_);
}

void NcclWorker::start() {
  session_.start(group_.get());
}

unsigned char* NcclWorker::chunk_buffer(std::size_t slot, uint64_t bytes) {
  if (device_.device_type == kDLCPU) {
    if (host_buffers_.size() <= slot) host_buffers_.resize(slot + 1);
    if (host_buffers_[slot].size() < bytes) host_buffers_[slot].resize(bytes);
    return host_buffers_[slot].data();
  }
  if (device_buffers_.size() <= slot) device_buffers_.resize(slot + 1);
  if (device_buffers_[slot].size() < bytes)
    device_buffers_[slot] = plugins::DeviceBytes(device_.device_id, bytes);
  return device_buffers_[slot].data();
}

void NcclWorker::wait_for_consumer() {
  if (device_.device_type == kDLCUDA) plugins::wait_stream(device_.device_id, stream_);
}

namespace {

plugins::ParamList read_update_info(const nlohmann::json& update_info) {
  sdk::FieldReader r(update_info, "update_info for backend 'nccl'");
  auto list = plugins::read_param_list(r);
  r.finish();
  return list;
}

}  // namespace

void NcclWorker::receive(const nlohmann::json& update_info, const sdk::LoaderRef& loader) {
  plugins::WorkerSession::Receiving receiving(session_);
  if (session_.verified(*group_, update_info)) return;
  receive_list(read_update_info(update_info), loader);
}

void NcclWorker::receive_text(const char* update_info, const sdk::LoaderRef& loader) {
  plugins::WorkerSession::Receiving receiving(session_);
  const plugins::ParamList* list =
      update_text_.list_of(update_info, [&](const nlohmann::json& parsed, plugins::ParamList& l) {
        if (session_.verified(*group_, parsed)) return false;  // the round's digests, not tensors
        l = read_update_info(parsed);
        return true;
      });
  if (list != nullptr) receive_list(*list, loader);
}

void NcclWorker::receive_list(const plugins::ParamList& list, const sdk::LoaderRef& loader) {
  const auto& params = list.params;
  auto tensor_of = [&](std::size_t i, void* data) {
    wt_tensor t{};
    t.name = params[i].name.c_str();
    t.tensor = DLTensor{data,
                        device_,
                        static_cast<int32_t>(params[i].shape.size()),
                        params[i].dtype,
                        const_cast<int64_t*>(params[i].shape.data()),
                        nullptr,
                        0};
    return t;
  };
  if (!packed_) {
    std::vector<unsigned char> own;
    std::vector<plugins::DeviceBytes> received;  // CUDA: alive until the consumer copied them
    for (std::size_t i = 0; i < params.size(); ++i) {
      const std::string what = "broadcast of '" + params[i].name + "'";
      auto dst = loader.destination(params[i]);
      if (dst && dst->device.device_type == device_.device_type &&
          dst->device.device_id == device_.device_id && dst->strides == nullptr) {
        group_->broadcast(static_cast<unsigned char*>(dst->data) + dst->byte_offset, list.nbytes[i],
                          params[i].dtype, 0, what);
        if (device_.device_type == kDLCUDA)  // the bytes are there when the stream says so
          plugins::wait_stream(device_.device_id, group_->stream());
        loader.written(params[i].name);
        continue;
      }
      void* data = nullptr;
      if (device_.device_type == kDLCPU) {
        own.resize(list.nbytes[i]);
        data = own.data();
      } else {
        data = received.emplace_back(device_.device_id, list.nbytes[i]).data();
      }
      group_->broadcast(data, list.nbytes[i], params[i].dtype, 0, what);
      wt_tensor t = tensor_of(i, data);
      loader.load({&t, 1});
    }
    wait_for_consumer();
    return;
  }
  // Packed: chunk c + slots is received into slot c % slots once chunk c was handed over, or
  // straight into place when the loader's destinations for its tensors lie back to back.
  const auto chunks = packed_chunks(list.nbytes, static_cast<uint64_t>(buffer_bytes_));
  const std::size_t slots = static_cast<std::size_t>(num_buffers_);
  std::vector<ChunkTarget> targets(slots);
  plugins::BroadcastPipeline pipeline(*group_, slots);
  auto submit = [&](std::size_t c) {
    ChunkTarget& target = targets[c % slots] = plan_chunk(list, chunks[c], loader);
    unsigned char* into =
        target.in_place ? target.places.front() : chunk_buffer(c % slots, chunks[c].bytes);
    target.buffer = into;
    in_place_chunks_ += target.in_place;
    const auto& first = list.params[chunks[c].first].name;
    const auto& last = list.params[chunks[c].last - 1].name;
    pipeline.submit(c % slots, into, chunks[c].bytes, kBytes,
                    "broadcast of packed chunk " + std::to_string(c + 1) + " of " +
                        std::to_string(chunks.size()) + " ('" + first +
                        (chunks[c].last - chunks[c].first > 1 ? "' to '" + last : "") + "')");
  };
  const uint64_t in_place_before = in_place_chunks_;
  for (std::size_t c = 0; c < std::min(slots, chunks.size()); ++c) submit(c);
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const std::size_t s = c % slots;
    pipeline.wait(s);
    hand_over(list, chunks[c], targets[s], loader, tensor_of);
    // The slot is received into again: the consumer's copies out of it are done first.
    if (c + slots < chunks.size()) {
      if (!targets[s].in_place) wait_for_consumer();
      submit(c + slots);
    }
  }
  wait_for_consumer();
  log_.debug("round: {} of {} packed chunk(s) received in place",
             in_place_chunks_ - in_place_before, chunks.size());
}

NcclWorker::ChunkTarget NcclWorker::plan_chunk(const plugins::ParamList& list, const Chunk& chunk,
                                               const sdk::LoaderRef& loader) {
  ChunkTarget target;
  target.in_place = true;
  for (std::size_t i = chunk.first; i < chunk.last; ++i) {
    auto dst = loader.destination(list.params[i]);
    if (!dst || dst->device.device_type != device_.device_type ||
        dst->device.device_id != device_.device_id || !is_compact(*dst)) {
      // Not offered (or not where this engine receives): this tensor and the rest go through
      // load(); the destinations already handed out are filled by copies.
      target.in_place = false;
      break;
    }
    unsigned char* place = static_cast<unsigned char*>(dst->data) + dst->byte_offset;
    if (!target.places.empty() && place != target.places.back() + list.nbytes[i - 1])
      target.in_place = false;
    target.places.push_back(place);
  }
  return target;
}

void NcclWorker::hand_over(const plugins::ParamList& list, const Chunk& chunk,
                           const ChunkTarget& target, const sdk::LoaderRef& loader,
                           const std::function<wt_tensor(std::size_t, void*)>& tensor_of) {
  const auto& params = list.params;
  if (device_.device_type == kDLCUDA)  // the bytes are there when the stream says so
    plugins::wait_stream(device_.device_id, group_->stream());
  if (target.in_place) {
    for (std::size_t i = chunk.first; i < chunk.last; ++i) loader.written(params[i].name);
    return;
  }
  std::vector<wt_tensor> views;
  uint64_t off = 0;
  for (std::size_t i = chunk.first; i < chunk.last; ++i) {
    unsigned char* from = target.buffer + off;
    off += list.nbytes[i];
    const std::size_t k = i - chunk.first;
    if (k >= target.places.size()) {
      views.push_back(tensor_of(i, from));
      continue;
    }
    if (device_.device_type == kDLCUDA)
      plugins::copy_async(device_.device_id, target.places[k], from, list.nbytes[i],
                          group_->stream());
    else
      std::memcpy(target.places[k], from, list.nbytes[i]);
  }
  if (device_.device_type == kDLCUDA && !target.places.empty())
    plugins::wait_stream(device_.device_id, group_->stream());
  for (std::size_t k = 0; k < target.places.size(); ++k)
    loader.written(params[chunk.first + k].name);
  if (!views.empty()) loader.load(views);
}

void NcclWorker::finish() {
  session_.finish();
}

void NcclWorker::abort() {
  session_.abort(group_.get());
}

}  // namespace wt::nccl
