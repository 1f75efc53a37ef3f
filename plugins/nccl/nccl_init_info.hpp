// The nccl trainer init info (vLLM's names, plus wt's device and deadlines):
//   device                    "cpu" (default: host memory over Gloo) or "cuda:N" (CUDA memory
//                             over NCCL, vLLM's unique-id mode, on device N)
//   master_address, master_port  the rendezvous the sender hosts (Gloo; unused with CUDA)
//   world_size (sender + every worker), rank
//   packed                    bool, default true
//   packed_buffer_size_bytes  int, default 1 GiB: a chunk closes once it holds more than this
//   packed_num_buffers        int, default 2: chunks in flight (packing overlaps broadcasting)
//   rendezvous_timeout_s      int, default 60: how long the group may take to form
//   transfer_timeout_s        int, default 300: the deadline of each broadcast
//   stall_timeout_s           int, default 60: host memory, a broadcast during which no byte moved
//                             on any of the sender's pairs for this long fails
// The sender ships the worker init info: vLLM's keys exactly (host: the rendezvous fields with
// rank_offset 1 instead of rank, and the packed fields; CUDA: nccl_unique_id_b64 in place of the
// address and port). The worker learns the wire parameters there and nowhere else; its deadlines
// are receiver-side backend options.
#pragma once

#include "../common/domain_init_info.hpp"
#include "../common/packed_options.hpp"

#include <optional>

namespace wt::nccl {

struct NcclInitInfo final : plugins::DomainInitInfo {
  bool packed = true;
  int64_t packed_buffer_size_bytes = int64_t{1} << 30;
  int64_t packed_num_buffers = 2;

  nlohmann::json to_json() const override {
    auto j = domain_json();
    j["packed"] = packed;
    j["packed_buffer_size_bytes"] = packed_buffer_size_bytes;
    j["packed_num_buffers"] = packed_num_buffers;
    return j;
  }

  // unique_id: the NCCL unique id (base64) of a CUDA group; none for host memory.
  nlohmann::json worker_init_info(const std::optional<std::string>& unique_id = {}) const {
    return rendezvous.worker_init_info(unique_id, packed, packed_buffer_size_bytes,
                                       packed_num_buffers);
  }

  static std::unique_ptr<sdk::InitInfoBase> parse(const nlohmann::json& fields) {
    sdk::FieldReader r(fields, "init_info for backend 'nccl'");
    auto info = std::make_unique<NcclInitInfo>();
    info->read_domain(r);
    const auto packing = plugins::PackedOptions::read(r, {true, info->packed_buffer_size_bytes, 2});
    info->packed = packing.packed;
    info->packed_buffer_size_bytes = packing.buffer_bytes;
    info->packed_num_buffers = packing.num_buffers;
    r.finish();
    packing.check(r.what());
    info->check_deadlines(r);
    return info;
  }
};

}  // namespace wt::nccl
