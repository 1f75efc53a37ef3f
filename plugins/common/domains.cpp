#include "domains.hpp"

#include "broadcast_group.hpp"
#include "nccl_communicator.hpp"

namespace wt::plugins {

using sdk::fail;

std::unique_ptr<Communicator> open_sender_domain(const SenderDomain& domain, sdk::ClientRef client,
                                                 const WorkerInitInfo& worker_init_info,
                                                 CommunicatorFactory make,
                                                 std::vector<std::unique_ptr<AsyncRpc>>& parked,
                                                 sdk::AbortSignal& aborted) {
  CommunicatorOptions o;
  o.master_address = domain.rendezvous.master_address;
  o.master_port = static_cast<int>(domain.rendezvous.master_port);
  o.rank = 0;
  o.world_size = static_cast<int>(domain.rendezvous.world_size);
  o.rendezvous_timeout = domain.rendezvous_timeout;
  o.transfer_timeout = domain.transfer_timeout;
  std::optional<std::string> unique_id;
  if (!make && domain.cuda_device < 0) {
    make = [](const CommunicatorOptions& opts) { return std::make_unique<BroadcastGroup>(opts); };
  } else if (!make) {
    unique_id = NcclCommunicator::unique_id_b64();
    make = [id = *unique_id, dev = domain.cuda_device](const CommunicatorOptions& opts) {
      return std::make_unique<NcclCommunicator>(id, 0, opts.world_size, dev,
                                                opts.rendezvous_timeout, opts.transfer_timeout);
    };
  }
  // The workers join inside init_weight_transfer_engine, so it runs beside our own join.
  auto rpc = std::make_unique<AsyncRpc>(
      [client, text = worker_init_info(unique_id).dump()] {
        client.init_weight_transfer_engine(text);
      },
      &aborted);
  std::unique_ptr<Communicator> comm;
  try {
    comm = make(o);
  } catch (const sdk::Error&) {
    if (rpc->done()) rpc->wait(aborted);  // the inference side's refusal says more
    parked.push_back(std::move(rpc));
    throw;
  }
  rpc->wait(aborted);
  return comm;
}

WorkerInit read_worker_init(const sdk::WorkerContext& context, const nlohmann::json& init_info,
                            const std::string& backend) {
  const std::string what = "init_info for backend '" + backend + "' (worker)";
  sdk::FieldReader r(init_info, what);
  WorkerInit w;
  // vLLM's rendezvous modes: an address and port, or an NCCL unique id; not both.
  const bool has_id = r.has("nccl_unique_id_b64");
  if (has_id && (r.has("master_address") || r.has("master_port")))
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid {}: pass nccl_unique_id_b64 OR master_address/master_port, not both", what);
  if (has_id) {
    w.unique_id = r.get_string("nccl_unique_id_b64");
    NcclCommunicator::decode_unique_id(w.unique_id, "nccl_unique_id_b64");
  } else {
    w.options.master_address = r.get_string("master_address");
    w.options.master_port = static_cast<int>(r.get_int("master_port"));
  }
  const int64_t rank_offset = r.get_int("rank_offset");
  w.options.world_size = static_cast<int>(r.get_int("world_size"));
  w.packed = r.opt_bool("packed", false);
  w.buffer_bytes = r.opt_int("packed_buffer_size_bytes", w.buffer_bytes);
  w.num_buffers = r.opt_int("packed_num_buffers", 2);
  r.finish();
  if (rank_offset < 1 || rank_offset >= w.options.world_size)
    fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: rank_offset {} is not in 1..{}", what, rank_offset,
         w.options.world_size - 1);
  if (w.buffer_bytes <= 0)
    fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: packed_buffer_size_bytes must be > 0", what);
  if (w.num_buffers < 1 || w.num_buffers > 64)
    fail(WT_ERR_INVALID_ARGUMENT, "invalid {}: packed_num_buffers must be in 1..64", what);
  sdk::FieldReader b(context.backend_options,
                     "backend options for backend '" + backend + "' (worker)");
  w.options.rendezvous_timeout = std::chrono::seconds(b.opt_int("rendezvous_timeout_s", 60));
  w.options.transfer_timeout = std::chrono::seconds(b.opt_int("transfer_timeout_s", 300));
  b.finish();
  w.options.rank = static_cast<int>(rank_offset);
  return w;
}

std::unique_ptr<Communicator> join_worker_domain(const WorkerInit& init, DLDevice device,
                                                 CommunicatorFactory make) {
  if (make) return make(init.options);
  const bool cuda = device.device_type == kDLCUDA;
  if (device.device_type != kDLCPU && !cuda)
    fail(WT_ERR_UNSUPPORTED, "this worker moves host or CUDA memory, not device type {}",
         static_cast<int>(device.device_type));
  if (cuda && init.unique_id.empty())
    fail(WT_ERR_INVALID_ARGUMENT,
         "a CUDA worker needs nccl_unique_id_b64 in its init info (the trainer sends it when its "
         "init info says device \"cuda:N\"); master_address/master_port is the host memory path");
  if (!cuda && !init.unique_id.empty())
    fail(WT_ERR_INVALID_ARGUMENT,
         "this worker keeps weights in host memory (over Gloo), but the trainer sent an NCCL "
         "unique id (its device is CUDA): run the receiver on a CUDA device");
  if (cuda)
    return std::make_unique<NcclCommunicator>(
        init.unique_id, init.options.rank, init.options.world_size, device.device_id,
        init.options.rendezvous_timeout, init.options.transfer_timeout);
  return std::make_unique<BroadcastGroup>(init.options);
}

}  // namespace wt::plugins
