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
// The sender ships the worker init info: vLLM's keys exactly (host: the rendezvous fields with
// rank_offset 1 instead of rank, and the packed fields; CUDA: nccl_unique_id_b64 in place of the
// address and port). The worker learns the wire parameters there and nowhere else; its deadlines
// are receiver-side backend options.
#pragma once

#include "../common/rendezvous_fields.hpp"

#include <wt/sdk/plugin.hpp>

#include <optional>

namespace wt::nccl {

struct NcclInitInfo final : sdk::InitInfoBase {
  plugins::RendezvousFields rendezvous;
  std::string device = "cpu";
  bool packed = true;
  int64_t packed_buffer_size_bytes = int64_t{1} << 30;
  int64_t packed_num_buffers = 2;
  int64_t rendezvous_timeout_s = 60;
  int64_t transfer_timeout_s = 300;

  // -1: host memory; otherwise the CUDA device.
  int cuda_device() const { return plugins::RendezvousFields::cuda_device(device); }

  nlohmann::json to_json() const override {
    auto j = rendezvous.to_json();
    j["device"] = device;
    j["packed"] = packed;
    j["packed_buffer_size_bytes"] = packed_buffer_size_bytes;
    j["packed_num_buffers"] = packed_num_buffers;
    j["rendezvous_timeout_s"] = rendezvous_timeout_s;
    j["transfer_timeout_s"] = transfer_timeout_s;
    return j;
  }
  int64_t rank() const override { return rendezvous.rank; }

  // unique_id: the NCCL unique id (base64) of a CUDA group; none for host memory.
  nlohmann::json worker_init_info(const std::optional<std::string>& unique_id = {}) const {
    return rendezvous.worker_init_info(unique_id, packed, packed_buffer_size_bytes,
                                       packed_num_buffers);
  }

  static std::unique_ptr<sdk::InitInfoBase> parse(const nlohmann::json& fields) {
    sdk::FieldReader r(fields, "init_info for backend 'nccl'");
    auto info = std::make_unique<NcclInitInfo>();
    info->device = plugins::RendezvousFields::read_device(r);
    info->rendezvous = plugins::RendezvousFields::read(r, info->device == "cpu");
    info->packed = r.opt_bool("packed", true);
    info->packed_buffer_size_bytes =
        r.opt_int("packed_buffer_size_bytes", info->packed_buffer_size_bytes);
    info->packed_num_buffers = r.opt_int("packed_num_buffers", 2);
    info->rendezvous_timeout_s = r.opt_int("rendezvous_timeout_s", 60);
    info->transfer_timeout_s = r.opt_int("transfer_timeout_s", 300);
    r.finish();
    if (info->packed_buffer_size_bytes <= 0)
      sdk::fail_field("packed_buffer_size_bytes", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'packed_buffer_size_bytes' must be > 0", r.what());
    if (info->packed_num_buffers < 1 || info->packed_num_buffers > 64)
      sdk::fail_field("packed_num_buffers", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'packed_num_buffers' must be in 1..64", r.what());
    for (auto [key, v] : {std::pair{"rendezvous_timeout_s", info->rendezvous_timeout_s},
                          std::pair{"transfer_timeout_s", info->transfer_timeout_s}})
      if (v < 1 || v > 86400)
        sdk::fail_field(key, WT_ERR_INVALID_ARGUMENT, "invalid {}: field '{}' must be in 1..86400",
                        r.what(), key);
    return info;
  }
};

}  // namespace wt::nccl
