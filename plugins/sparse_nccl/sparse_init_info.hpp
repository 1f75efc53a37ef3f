// The sparse_nccl trainer init info (vLLM's names, plus wt's device and deadlines):
//   device                    "cpu" (default: host memory over Gloo) or "cuda:N" (NCCL)
//   master_address, master_port  the rendezvous the sender hosts (Gloo; unused with CUDA)
//   world_size (sender + every worker), rank
//   rendezvous_timeout_s      int, default 60;  transfer_timeout_s  int, default 300
// No packing parameters: sparse rounds are never packed. The worker init info the sender ships is
// vLLM's 7 keys with the unpacked defaults (packed false, 1 GiB, 2), as the dense worker reads it.
#pragma once

#include "../common/rendezvous_fields.hpp"

#include <wt/sdk/plugin.hpp>

#include <optional>

namespace wt::sparse {

struct SparseInitInfo final : sdk::InitInfoBase {
  plugins::RendezvousFields rendezvous;
  std::string device = "cpu";
  int64_t rendezvous_timeout_s = 60;
  int64_t transfer_timeout_s = 300;

  int cuda_device() const { return plugins::RendezvousFields::cuda_device(device); }

  nlohmann::json to_json() const override {
    auto j = rendezvous.to_json();
    j["device"] = device;
    j["rendezvous_timeout_s"] = rendezvous_timeout_s;
    j["transfer_timeout_s"] = transfer_timeout_s;
    return j;
  }
  int64_t rank() const override { return rendezvous.rank; }

  nlohmann::json worker_init_info(const std::optional<std::string>& unique_id) const {
    return rendezvous.worker_init_info(unique_id, false, int64_t{1} << 30, 2);
  }

  static std::unique_ptr<sdk::InitInfoBase> parse(const nlohmann::json& fields) {
    sdk::FieldReader r(fields, "init_info for backend 'sparse_nccl'");
    auto info = std::make_unique<SparseInitInfo>();
    info->device = plugins::RendezvousFields::read_device(r);
    info->rendezvous = plugins::RendezvousFields::read(r, info->device == "cpu");
    info->rendezvous_timeout_s = r.opt_int("rendezvous_timeout_s", 60);
    info->transfer_timeout_s = r.opt_int("transfer_timeout_s", 300);
    r.finish();
    for (auto [key, v] : {std::pair{"rendezvous_timeout_s", info->rendezvous_timeout_s},
                          std::pair{"transfer_timeout_s", info->transfer_timeout_s}})
      if (v < 1 || v > 86400)
        sdk::fail_field(key, WT_ERR_INVALID_ARGUMENT, "invalid {}: field '{}' must be in 1..86400",
                        r.what(), key);
    return info;
  }
};

}  // namespace wt::sparse
