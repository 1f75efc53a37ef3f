#include "domains.hpp"

#include "broadcast_group.hpp"
#include "nccl_communicator.hpp"
#include "packed_options.hpp"
#include "round_digests.hpp"
#include "session_keys.hpp"
#include "session_secret.hpp"

#include <wt/sdk/rank_keys.hpp>
#include "tcp_store.hpp"

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
  o.stall_timeout = domain.stall_timeout;
  o.warn = domain.warn;
  std::optional<std::string> unique_id;
  if (!make && domain.cuda_device < 0) {
    // A secret for this session, and the store listening before any receiver is told where to
    // meet: a trainer that cannot host it sends no init.
    const SessionSecret secret = SessionSecret::mint();
    o.session_secret = secret.hex();
    auto store = std::make_shared<std::unique_ptr<TcpStoreServer>>(std::make_unique<TcpStoreServer>(
        o.master_address, o.master_port, secret,
        TcpStoreServer::Limits::for_mesh(o.world_size, o.pairs), o.warn));
    // Every broadcast digested, the digests delivered after the data (round_digests.hpp).
    make = [store, seed = digest_seed(o.session_secret)](const CommunicatorOptions& opts) {
      return std::make_unique<DigestedDomain>(
          std::make_unique<BroadcastGroup>(opts, std::move(*store)), true, seed);
    };
  } else if (!make) {
    unique_id = NcclCommunicator::unique_id_b64();
    make = [id = *unique_id, dev = domain.cuda_device,
            stop = &aborted](const CommunicatorOptions& opts) {
      return std::make_unique<NcclCommunicator>(
          id, 0, opts.world_size, dev, opts.rendezvous_timeout, opts.transfer_timeout, stop);
    };
  }
  // The workers join inside init_weight_transfer_engine, so it runs beside our own join.
  nlohmann::json info = worker_init_info(unique_id);
  if (!o.session_secret.empty()) {
    // Each worker its own key only (the fan-out client and wt serve split the field per rank).
    info[sdk::kRankKeysField] =
        rank_keys_json(SessionSecret::from_hex(o.session_secret, "secret"), o.world_size - 1, 1);
    info[kRoundDigestsKey] = kRoundDigestsAlgorithm;
    info[kRoundDigestsSeedKey] = seed_hex(digest_seed(o.session_secret));
    // wt's own sessions only: vLLM's workers take vLLM's keys (and these are wt's already).
    info[kTrainerRendezvousKey] = domain.rendezvous_timeout.count();
  }
  // Workers that refused the init never come: stop waiting for them then, not at the deadline.
  // The rendezvous may poll this from a thread that outlives this call (a mesh that never formed):
  // it owns what it polls.
  auto refused = std::make_shared<std::atomic<bool>>(false);
  auto rpc = std::make_unique<AsyncRpc>(
      [client, text = info.dump()] { client.init_weight_transfer_engine(text); }, &aborted,
      [refused] { *refused = true; });
  o.give_up = [refused] { return refused->load(); };
  std::unique_ptr<Communicator> comm;
  try {
    comm = make(o);
  } catch (const sdk::Error&) {
    if (rpc->done()) rpc->wait(aborted);  // the inference side's refusal says more
    // A receiver that stopped answering holds the init call: it is interrupted, so that the
    // engine's failure is reported at the rendezvous deadline, not at the client's.
    client.abandon_calls();
    parked.push_back(std::move(rpc));
    throw;
  }
  rpc->wait(aborted);
  return comm;
}

WorkerInit read_worker_init(const sdk::WorkerContext& context, const nlohmann::json& init_info,
                            const std::string& backend, const std::vector<std::string>& extra) {
  const std::string what = "init_info for backend '" + backend + "' (worker)";
  sdk::FieldReader r(init_info, what);
  WorkerInit w;
  // vLLM's rendezvous modes: an address and port, or an NCCL unique id; not both.
  const bool has_id = r.has("nccl_unique_id_b64");
  nlohmann::json rank_keys;
  if (has_id && (r.has("master_address") || r.has("master_port")))
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid {}: pass nccl_unique_id_b64 OR master_address/master_port, not both", what);
  if (has_id) {
    w.unique_id = r.get_string("nccl_unique_id_b64");
    NcclCommunicator::decode_unique_id(w.unique_id, "nccl_unique_id_b64");
  } else {
    w.options.master_address = r.get_string("master_address");
    const int64_t port = r.get_int("master_port");
    if (port < 1 || port > 65535)
      sdk::fail_field("master_port", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'master_port' must be in 1..65535, got {}", what, port);
    w.options.master_port = static_cast<int>(port);
    // Host memory: this rank's own key (read with rank_offset below; absent from older senders).
    if (r.has(sdk::kRankKeysField)) rank_keys = r.raw(sdk::kRankKeysField);
    // And whether it digests every broadcast (wt 0.3 senders): then each round is verified.
    if (r.has(kRoundDigestsKey)) {
      const std::string algorithm = r.get_string(kRoundDigestsKey);
      if (algorithm != kRoundDigestsAlgorithm)
        sdk::fail_field(kRoundDigestsKey, WT_ERR_INVALID_ARGUMENT,
                        "invalid {}: field '{}' must be \"{}\", got \"{}\"", what, kRoundDigestsKey,
                        kRoundDigestsAlgorithm, algorithm);
      w.digest_seed = seed_from_hex(r.get_string(kRoundDigestsSeedKey), what);
      w.round_digests = true;
    }
  }
  const auto trainer_rendezvous = read_trainer_rendezvous(r);
  const int64_t rank_offset = r.get_int("rank_offset");
  const int64_t world_size = r.get_int("world_size");
  const auto packing = PackedOptions::read(r, {false, w.buffer_bytes, 2});
  w.packed = packing.packed;
  w.buffer_bytes = packing.buffer_bytes;
  w.num_buffers = packing.num_buffers;
  for (const auto& key : extra)
    if (r.has(key)) w.extra[key] = r.get_string(key);
  r.finish();
  if (world_size < 2 || world_size > kMaxWorld)
    sdk::fail_field("world_size", WT_ERR_INVALID_ARGUMENT,
                    "invalid {}: field 'world_size' must be in 2..{}, got {}", what, kMaxWorld,
                    world_size);
  w.options.world_size = static_cast<int>(world_size);
  if (rank_offset < 1 || rank_offset >= w.options.world_size)
    sdk::fail_field("rank_offset", WT_ERR_INVALID_ARGUMENT,
                    "invalid {}: rank_offset {} is not in 1..{}", what, rank_offset,
                    w.options.world_size - 1);
  packing.check(what);
  read_worker_deadlines(context, backend, w.options, trainer_rendezvous);
  w.options.rank = static_cast<int>(rank_offset);
  if (!rank_keys.is_null()) w.options.rank_key = own_rank_key(rank_keys, rank_offset, what);
  return w;
}

std::optional<std::chrono::seconds> read_trainer_rendezvous(sdk::FieldReader& r) {
  if (!r.has(kTrainerRendezvousKey)) return std::nullopt;
  const int64_t s = r.get_int(kTrainerRendezvousKey);
  if (s < 1 || s > 86400)
    sdk::fail_field(kTrainerRendezvousKey, WT_ERR_INVALID_ARGUMENT,
                    "invalid {}: field '{}' must be in 1..86400, got {}", r.what(),
                    kTrainerRendezvousKey, s);
  return std::chrono::seconds(s);
}

void read_worker_deadlines(const sdk::WorkerContext& context, const std::string& backend,
                           CommunicatorOptions& options,
                           std::optional<std::chrono::seconds> trainer_rendezvous) {
  sdk::FieldReader b(context.backend_options,
                     "backend options for backend '" + backend + "' (worker)");
  const int64_t rendezvous_s = b.opt_int("rendezvous_timeout_s", 60);
  const int64_t transfer_s = b.opt_int("transfer_timeout_s", 300);
  const int64_t stall_s = b.opt_int("stall_timeout_s", 60);
  b.finish();
  for (auto [key, v] :
       {std::pair{"rendezvous_timeout_s", rendezvous_s},
        std::pair{"transfer_timeout_s", transfer_s}, std::pair{"stall_timeout_s", stall_s}})
    if (v < 1 || v > 86400)
      sdk::fail_field(key, WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field '{}' must be in 1..86400, got {}", b.what(), key, v);
  options.rendezvous_timeout = std::chrono::seconds(rendezvous_s);
  // Waiting longer than the trainer would only delay its report: it has given up by then.
  if (trainer_rendezvous && *trainer_rendezvous < options.rendezvous_timeout)
    options.rendezvous_timeout = *trainer_rendezvous;
  options.transfer_timeout = std::chrono::seconds(transfer_s);
  options.stall_timeout = std::chrono::seconds(stall_s);
}

std::unique_ptr<Communicator> join_worker_domain(const WorkerInit& init, DLDevice device,
                                                 CommunicatorFactory make) {
  auto domain = join_plain_domain(init, device, std::move(make));
  if (!init.round_digests) return domain;
  return std::make_unique<DigestedDomain>(std::move(domain), false, init.digest_seed);
}

std::unique_ptr<Communicator> join_plain_domain(const WorkerInit& init, DLDevice device,
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
