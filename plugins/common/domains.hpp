// Making the broadcast domain, as the nccl and sparse_nccl engines both do (compiled into each).
//
// Sender (trainer rank 0): host memory gets a Gloo group meeting at the store it hosts at
// master_address:master_port; CUDA memory an NCCL communicator from a unique id it mints (vLLM's
// unique-id mode). The worker init info goes out through init_weight_transfer_engine on a side
// thread meanwhile: the workers join from inside that call. A refusal from the inference side that
// already arrived is reported rather than "the workers never came".
//
// Worker: the init info the sender shipped names the mode (address and port, or
// nccl_unique_id_b64, never both) and the wire parameters; the deadlines are receiver-side backend
// options, except that a worker never waits for the group longer than its trainer does (the
// trainer ships its rendezvous deadline): a group that cannot form is then reported within the
// trainer's deadline, not when the init call's HTTP timeout runs out.
#pragma once

#include "async_rpc.hpp"
#include "communicator.hpp"
#include "rendezvous_fields.hpp"

#include <wt/sdk/plugin.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace wt::plugins {

struct SenderDomain {
  RendezvousFields rendezvous;
  int cuda_device = -1;  // -1: host memory
  std::chrono::seconds rendezvous_timeout{60};
  std::chrono::seconds transfer_timeout{300};
  std::chrono::seconds stall_timeout{60};
  std::function<void(const std::string&)> warn;  // the host's log: strangers the store dropped
};

// The worker init info to ship, given the unique id of a CUDA domain (none for host memory).
using WorkerInitInfo = std::function<nlohmann::json(const std::optional<std::string>& unique_id)>;

// make: empty for Gloo or NCCL by the device (tests pass a spy). RPC threads of a failed join go
// to `parked` (never joined on the error path).
std::unique_ptr<Communicator> open_sender_domain(const SenderDomain& domain, sdk::ClientRef client,
                                                 const WorkerInitInfo& worker_init_info,
                                                 CommunicatorFactory make,
                                                 std::vector<std::unique_ptr<AsyncRpc>>& parked,
                                                 sdk::AbortSignal& aborted);

struct WorkerInit {
  CommunicatorOptions options;  // rank = rank_offset: one worker per receiver
  std::string unique_id;        // base64; empty: address and port (host memory)
  bool packed = false;          // vLLM's worker default
  int64_t buffer_bytes = int64_t{1} << 30;
  int64_t num_buffers = 2;
  std::map<std::string, std::string> extra;  // the backend's own string fields, when present
  bool round_digests = false;  // every broadcast digested and each round verified (host memory)
  uint64_t digest_seed = 0;    // with round_digests
};

// The largest world a worker accepts (ranks are ints on every transport).
constexpr int64_t kMaxWorld = 65536;

// Reads and checks a worker init info and the receiver-side options; errors name the field.
// `extra`: optional string fields of the backend's own wire (kept in WorkerInit::extra).
WorkerInit read_worker_init(const sdk::WorkerContext& context, const nlohmann::json& init_info,
                            const std::string& backend, const std::vector<std::string>& extra = {});

// The worker init info field with the trainer's rendezvous deadline in seconds (wt senders from
// 0.3; the field is optional, so older senders' infos still read).
inline constexpr char kTrainerRendezvousKey[] = "rendezvous_timeout_s";

// The trainer's rendezvous deadline from a worker init info, if it carries one (1..86400 s;
// errors name the field).
std::optional<std::chrono::seconds> read_trainer_rendezvous(sdk::FieldReader& r);

// The receiver-side deadlines (backend options rendezvous_timeout_s, transfer_timeout_s,
// stall_timeout_s; 60, 300 and 60 s by default) into `options`; errors name the field. The
// rendezvous deadline is at most `trainer_rendezvous`, when the trainer sent one.
void read_worker_deadlines(const sdk::WorkerContext& context, const std::string& backend,
                           CommunicatorOptions& options,
                           std::optional<std::chrono::seconds> trainer_rendezvous = {});

// Joins: NCCL on a CUDA device (needs the unique id), Gloo on the CPU (needs address and port);
// the other way round is refused with the reason. make: empty for those (tests pass a spy).
// With round_digests, the domain digests what arrives (round_digests.hpp), whatever `make` gave.
std::unique_ptr<Communicator> join_worker_domain(const WorkerInit& init, DLDevice device,
                                                 CommunicatorFactory make);
// The domain alone, undigested.
std::unique_ptr<Communicator> join_plain_domain(const WorkerInit& init, DLDevice device,
                                                CommunicatorFactory make);

}  // namespace wt::plugins
