#include "nccl_worker.hpp"

#include "../common/param_list.hpp"
#include "packed_chunks.hpp"

#include <cstring>
#include <optional>

namespace wt::nccl {

using sdk::fail;

NcclWorker::NcclWorker(const sdk::WorkerContext& context, const nlohmann::json& init_info)
    : log_(context.host, "[nccl] ") {
  if (context.device.device_type != kDLCPU)
    fail(WT_ERR_UNSUPPORTED,
         "this nccl worker keeps weights in host memory (over Gloo); the NCCL path for CUDA "
         "memory is not in this version");
  sdk::FieldReader r(init_info, "init_info for backend 'nccl' (worker)");
  plugins::BroadcastGroup::Options o;
  o.master_address = r.get_string("master_address");
  o.master_port = static_cast<int>(r.get_int("master_port"));
  const int64_t rank_offset = r.get_int("rank_offset");
  o.world_size = static_cast<int>(r.get_int("world_size"));
  packed_ = r.opt_bool("packed", false);
  buffer_bytes_ = r.opt_int("packed_buffer_size_bytes", buffer_bytes_);
  r.opt_int("packed_num_buffers", 2);
  r.finish();
  if (rank_offset < 1 || rank_offset >= o.world_size)
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid init_info for backend 'nccl' (worker): rank_offset {} is not in 1..{}",
         rank_offset, o.world_size - 1);
  if (buffer_bytes_ <= 0)
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid init_info for backend 'nccl' (worker): packed_buffer_size_bytes must be > 0");
  // Receiver-side options: the deadlines (the wire carries only vLLM's keys).
  sdk::FieldReader b(context.backend_options, "backend options for backend 'nccl' (worker)");
  o.rendezvous_timeout = std::chrono::seconds(b.opt_int("rendezvous_timeout_s", 60));
  o.transfer_timeout = std::chrono::seconds(b.opt_int("transfer_timeout_s", 300));
  b.finish();
  o.rank = static_cast<int>(rank_offset);  // one worker per receiver
  group_ = std::make_unique<plugins::BroadcastGroup>(o);
  log_.debug("worker ready: rank {} of {}, packed={}", o.rank, o.world_size, packed_);
}

void NcclWorker::start() {
  std::lock_guard<std::mutex> l(mu_);
  if (active_) fail(WT_ERR_STATE, "a weight update is already active; call finish first");
  if (group_ == nullptr || group_->broken())
    fail(WT_ERR_STATE, "the nccl group broke in an earlier update; initialise the engine again");
  active_ = true;
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
                        {kDLCPU, 0},
                        static_cast<int32_t>(params[i].shape.size()),
                        params[i].dtype,
                        const_cast<int64_t*>(params[i].shape.data()),
                        nullptr,
                        0};
    return t;
  };
  if (!packed_) {
    std::vector<unsigned char> own;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const std::string what = "broadcast of '" + params[i].name + "'";
      if (auto dst = loader.destination(params[i]);
          dst && dst->device.device_type == kDLCPU && dst->strides == nullptr) {
        group_->broadcast(static_cast<unsigned char*>(dst->data) + dst->byte_offset, list.nbytes[i],
                          0, what);
        loader.written(params[i].name);
      } else {
        own.resize(list.nbytes[i]);
        group_->broadcast(own.data(), list.nbytes[i], 0, what);
        wt_tensor t = tensor_of(i, own.data());
        loader.load({&t, 1});
      }
    }
    return;
  }
  const auto chunks = packed_chunks(list.nbytes, static_cast<uint64_t>(buffer_bytes_));
  std::vector<unsigned char> buffer;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    buffer.resize(chunks[c].bytes);
    group_->broadcast(buffer.data(), chunks[c].bytes, 0,
                      "broadcast of packed chunk " + std::to_string(c + 1) + " of " +
                          std::to_string(chunks.size()));
    std::vector<wt_tensor> views;
    uint64_t off = 0;
    for (std::size_t i = chunks[c].first; i < chunks[c].last; ++i) {
      views.push_back(tensor_of(i, buffer.data() + off));
      off += list.nbytes[i];
    }
    loader.load(views);  // copied during the call: the buffer is reused for the next chunk
  }
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
  if (receiving_) group_->abort();
}

}  // namespace wt::nccl
