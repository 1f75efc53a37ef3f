#include "nccl_worker.hpp"

#include "../common/broadcast_group.hpp"
#include "../common/broadcast_pipeline.hpp"
#include "../common/nccl_communicator.hpp"
#include "../common/param_list.hpp"
#include "packed_chunks.hpp"

#include <cstring>
#include <optional>

namespace wt::nccl {

using sdk::fail;

namespace {
constexpr DLDataType kBytes{kDLUInt, 8, 1};
constexpr const char* kWhat = "init_info for backend 'nccl' (worker)";
}  // namespace

NcclWorker::NcclWorker(const sdk::WorkerContext& context, const nlohmann::json& init_info,
                       plugins::CommunicatorFactory make_communicator)
    : log_(context.host, "[nccl] "), device_(context.device), stream_(context.stream) {
  if (device_.device_type != kDLCPU && device_.device_type != kDLCUDA)
    fail(WT_ERR_UNSUPPORTED, "the nccl worker moves host or CUDA memory, not device type {}",
         static_cast<int>(device_.device_type));
  const bool cuda = device_.device_type == kDLCUDA;
  sdk::FieldReader r(init_info, kWhat);
  plugins::CommunicatorOptions o;
  std::string unique_id;
  // vLLM's rendezvous modes: an address and port (Gloo here), or an NCCL unique id; not both.
  const bool has_id = r.has("nccl_unique_id_b64");
  const bool has_address = r.has("master_address") || r.has("master_port");
  if (has_id && has_address)
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid {}: pass nccl_unique_id_b64 OR master_address/master_port, not both", kWhat);
  if (has_id) {
    unique_id = r.get_string("nccl_unique_id_b64");
    plugins::NcclCommunicator::decode_unique_id(unique_id, "nccl_unique_id_b64");
  } else {
    o.master_address = r.get_string("master_address");
    o.master_port = static_cast<int>(r.get_int("master_port"));
  }
  const int64_t rank_offset = r.get_int("rank_offset");
  o.world_size = static_cast<int>(r.get_int("world_size"));
  packed_ = r.opt_bool("packed", false);
  buffer_bytes_ = r.opt_int("packed_buffer_size_bytes", buffer_bytes_);
  num_buffers_ = r.opt_int("packed_num_buffers", 2);
  r.finish();
  if (rank_offset < 1 || rank_offset >= o.world_size)
    fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: rank_offset {} is not in 1..{}", kWhat, rank_offset,
         o.world_size - 1);
  if (buffer_bytes_ <= 0)
    fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: packed_buffer_size_bytes must be > 0", kWhat);
  if (num_buffers_ < 1 || num_buffers_ > 64)
    fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: packed_num_buffers must be in 1..64", kWhat);
  // Receiver-side options: the deadlines (the wire carries only vLLM's keys).
  sdk::FieldReader b(context.backend_options, "backend options for backend 'nccl' (worker)");
  o.rendezvous_timeout = std::chrono::seconds(b.opt_int("rendezvous_timeout_s", 60));
  o.transfer_timeout = std::chrono::seconds(b.opt_int("transfer_timeout_s", 300));
  b.finish();
  o.rank = static_cast<int>(rank_offset);  // one worker per receiver
  if (!make_communicator) {
    if (cuda && !has_id)
      fail(WT_ERR_INVALID_ARGUMENT,
           "a CUDA nccl worker needs nccl_unique_id_b64 in its init info (the trainer sends it "
           "when its init info says device \"cuda:N\"); master_address/master_port is the host "
           "memory path");
    if (!cuda && has_id)
      fail(WT_ERR_INVALID_ARGUMENT,
           "this nccl worker keeps weights in host memory (over Gloo), but the trainer sent an "
           "NCCL unique id (its device is CUDA): run the receiver on a CUDA device");
    if (cuda)
      make_communicator = [&unique_id, dev = device_.device_id](const auto& opts) {
        return std::make_unique<plugins::NcclCommunicator>(unique_id, opts.rank, opts.world_size,
                                                           dev, opts.rendezvous_timeout,
                                                           opts.transfer_timeout);
      };
    else
      make_communicator = [](const auto& opts) {
        return std::make_unique<plugins::BroadcastGroup>(opts);
      };
  }
  group_ = make_communicator(o);
  log_.debug("worker ready: rank {} of {}, packed={}", o.rank, o.world_size, packed_);
}

void NcclWorker::start() {
  std::lock_guard<std::mutex> l(mu_);
  if (active_) fail(WT_ERR_STATE, "a weight update is already active; call finish first");
  if (group_ == nullptr || group_->broken())
    fail(WT_ERR_STATE, "the nccl group broke in an earlier update; initialise the engine again");
  active_ = true;
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

void NcclWorker::receive(const nlohmann::json& update_info, const sdk::LoaderRef& loader) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!active_) fail(WT_ERR_STATE, "start must be called before receive");
    receiving_ = true;
  }
  struct Done {
    NcclWorker& w;
    ~Done() {
      std::lock_guard<std::mutex> l(w.mu_);
      w.receiving_ = false;
    }
  } done{*this};
  sdk::FieldReader r(update_info, "update_info for backend 'nccl'");
  auto list = plugins::read_param_list(r);
  r.finish();
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
  // Packed: chunk c + slots is received into slot c % slots once chunk c was handed over.
  const auto chunks = packed_chunks(list.nbytes, static_cast<uint64_t>(buffer_bytes_));
  const std::size_t slots = static_cast<std::size_t>(num_buffers_);
  std::vector<unsigned char*> buffers(slots, nullptr);
  plugins::BroadcastPipeline pipeline(*group_, slots);
  auto submit = [&](std::size_t c) {
    const std::size_t s = c % slots;
    buffers[s] = chunk_buffer(s, chunks[c].bytes);
    pipeline.submit(s, buffers[s], chunks[c].bytes, kBytes,
                    "broadcast of packed chunk " + std::to_string(c + 1) + " of " +
                        std::to_string(chunks.size()));
  };
  for (std::size_t c = 0; c < std::min(slots, chunks.size()); ++c) submit(c);
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const std::size_t s = c % slots;
    pipeline.wait(s);
    std::vector<wt_tensor> views;
    uint64_t off = 0;
    for (std::size_t i = chunks[c].first; i < chunks[c].last; ++i) {
      views.push_back(tensor_of(i, buffers[s] + off));
      off += list.nbytes[i];
    }
    loader.load(views);
    // The slot is received into again: the consumer's copies out of it are done first.
    if (c + slots < chunks.size()) {
      wait_for_consumer();
      submit(c + slots);
    }
  }
  wait_for_consumer();
}

void NcclWorker::finish() {
  std::lock_guard<std::mutex> l(mu_);
  if (!active_) fail(WT_ERR_STATE, "finish called with no active weight update");
  active_ = false;
}

void NcclWorker::abort() {
  std::lock_guard<std::mutex> l(mu_);
  active_ = false;
  // Mid-receive, the broadcast it waits in is interrupted (the group is then broken: the engine
  // must be initialised again). Between updates the group stays as it is.
  if (receiving_ && group_) group_->abort();
}

}  // namespace wt::nccl
