// The nccl worker engine, host memory over Gloo: joins the group at init (rank_offset, from the
// worker init info the sender shipped), then per update receives every tensor the update names,
// straight into the receiver's memory where the loader offers a destination (unpacked), or through
// the rotating packed chunks, and hands each tensor over before receive returns.
#pragma once

#include "../common/broadcast_group.hpp"

#include <wt/sdk/plugin.hpp>

#include <memory>
#include <mutex>

namespace wt::nccl {

class NcclWorker final : public sdk::WorkerBase {
 public:
  NcclWorker(const sdk::WorkerContext& context, const nlohmann::json& init_info);
  void start() override;
  void receive(const nlohmann::json& update_info, const sdk::LoaderRef& loader) override;
  void finish() override;
  void abort() override;

 private:
  sdk::HostLog log_;
  bool packed_ = false;
  int64_t buffer_bytes_ = int64_t{1} << 30;
  std::unique_ptr<plugins::BroadcastGroup> group_;
  std::mutex mu_;  // active_, receiving_: abort() may come from another thread
  bool active_ = false;
  bool receiving_ = false;  // a receive is in progress: abort() interrupts its broadcast
};

}  // namespace wt::nccl
