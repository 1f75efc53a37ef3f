// The trainer init-info fields the nccl and sparse_nccl backends share: the rendezvous (vLLM's
// names), wt's `device` ("cpu": host memory over Gloo; "cuda:N": CUDA memory over NCCL) and the
// deadlines. Each backend's init info derives from it and adds its own fields.
#pragma once

#include "domains.hpp"
#include "rendezvous_fields.hpp"

#include <wt/sdk/host_log.hpp>
#include <wt/sdk/plugin.hpp>

namespace wt::plugins {

struct DomainInitInfo : sdk::InitInfoBase {
  RendezvousFields rendezvous;
  std::string device = "cpu";
  int64_t rendezvous_timeout_s = 60;  // how long the group may take to form
  int64_t transfer_timeout_s = 300;   // the deadline of each broadcast
  int64_t stall_timeout_s = 60;       // host memory: no byte moving for this long fails a wait

  int cuda_device() const { return RendezvousFields::cuda_device(device); }
  int64_t rank() const override { return rendezvous.rank; }

  // `log`: where the store reports the strangers it dropped.
  SenderDomain sender_domain(const sdk::HostLog& log) const {
    SenderDomain d;
    d.warn = [log](const std::string& m) { log.warn("{}", m); };
    d.rendezvous = rendezvous;
    d.cuda_device = cuda_device();
    d.rendezvous_timeout = std::chrono::seconds(rendezvous_timeout_s);
    d.transfer_timeout = std::chrono::seconds(transfer_timeout_s);
    d.stall_timeout = std::chrono::seconds(stall_timeout_s);
    return d;
  }

 protected:
  // Reads device, the rendezvous fields and the deadlines (the caller reads its own, then
  // r.finish(), then check_deadlines()).
  void read_domain(sdk::FieldReader& r) {
    device = RendezvousFields::read_device(r);
    rendezvous = RendezvousFields::read(r, device == "cpu");
    rendezvous_timeout_s = r.opt_int("rendezvous_timeout_s", 60);
    transfer_timeout_s = r.opt_int("transfer_timeout_s", 300);
    stall_timeout_s = r.opt_int("stall_timeout_s", 60);
  }
  void check_deadlines(const sdk::FieldReader& r) const {
    for (auto [key, v] : {std::pair{"rendezvous_timeout_s", rendezvous_timeout_s},
                          std::pair{"transfer_timeout_s", transfer_timeout_s},
                          std::pair{"stall_timeout_s", stall_timeout_s}})
      if (v < 1 || v > 86400)
        sdk::fail_field(key, WT_ERR_INVALID_ARGUMENT, "invalid {}: field '{}' must be in 1..86400",
                        r.what(), key);
  }
  nlohmann::json domain_json() const {
    auto j = rendezvous.to_json();
    j["device"] = device;
    j["rendezvous_timeout_s"] = rendezvous_timeout_s;
    j["transfer_timeout_s"] = transfer_timeout_s;
    j["stall_timeout_s"] = stall_timeout_s;
    return j;
  }
};

}  // namespace wt::plugins
