// The sparse_nccl trainer init info (vLLM's names, plus wt's device and deadlines):
//   device                    "cpu" (default: host memory over Gloo) or "cuda:N" (NCCL)
//   master_address, master_port  the rendezvous the sender hosts (Gloo; unused with CUDA)
//   world_size (sender + every worker), rank
//   rendezvous_timeout_s      int, default 60;  transfer_timeout_s  int, default 300;
//   stall_timeout_s           int, default 60 (host memory: no byte moving for this long fails)
// No packing parameters: sparse rounds are never packed. The worker init info the sender ships is
// vLLM's 7 keys with the unpacked defaults (packed false, 1 GiB, 2), as the dense worker reads it.
#pragma once

#include "../common/domain_init_info.hpp"

#include <optional>

namespace wt::sparse {

struct SparseInitInfo final : plugins::DomainInitInfo {
  nlohmann::json to_json() const override { return domain_json(); }

  nlohmann::json worker_init_info(const std::optional<std::string>& unique_id) const {
    return rendezvous.worker_init_info(unique_id, false, int64_t{1} << 30, 2);
  }

  static std::unique_ptr<sdk::InitInfoBase> parse(const nlohmann::json& fields) {
    sdk::FieldReader r(fields, "init_info for backend 'sparse_nccl'");
    auto info = std::make_unique<SparseInitInfo>();
    info->read_domain(r);
    r.finish();
    info->check_deadlines(r);
    return info;
  }
};

}  // namespace wt::sparse
