#include "sparse_trainer.hpp"

#include "../common/device_bytes.hpp"
#include "../common/domains.hpp"
#include "../common/round_digests.hpp"
#include "packed_round.hpp"
#include "patch_rules.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/parallel_copy.hpp>

namespace wt::sparse {

using sdk::fail;

namespace {

void read_device(int device, void* dst, const void* src, std::size_t n) {
  plugins::copy_async(device, dst, src, n, nullptr);
  plugins::wait_stream(device, nullptr);
}

}  // namespace

SparseTrainer::SparseTrainer(const sdk::TrainerContext& context, const SparseInitInfo& info,
                             plugins::CommunicatorFactory make_communicator, bool pack_host_rounds)
    : log_(context.host, "[sparse_nccl] "),
      info_(info),
      client_(context.client),
      sender_(info.rendezvous.rank == 0),
      pack_host_rounds_(pack_host_rounds) {
  if (context.source.valid())
    fail(WT_ERR_INVALID_ARGUMENT,
         "sparse_nccl takes no WeightSource: each round's patches are what send_weights sends");
  if (!sender_) return;
  group_ = plugins::open_sender_domain(
      info.sender_domain(log_), client_,
      [&](const auto& unique_id) {
        auto j = info.worker_init_info(unique_id);
        // Host memory only (CUDA keeps vLLM's keys): which round format the broadcasts use.
        if (!unique_id) j["host_round_format"] = pack_host_rounds_ ? "packed" : "per_patch";
        return j;
      },
      std::move(make_communicator), parked_, aborted_);
}

SparseTrainer::~SparseTrainer() = default;

void SparseTrainer::abort() {
  aborted_.abort();
  std::lock_guard<std::mutex> l(group_mu_);
  if (group_) group_->abort();
}

void SparseTrainer::send_weights(const sdk::SendArgs& args) {
  if (aborted_.aborted()) fail(WT_ERR_ABORTED, "the sparse_nccl trainer engine was aborted");
  if (!sender_ || args.patches.empty()) return;  // nothing at all: no RPC, no collective
  // CUDA patches: the producer's kernels are done before the check reads them (and before the
  // broadcasts do). A round that turns out to mix memories is refused by the check.
  const DLDevice first = args.patches.front().indices.device;
  if (first.device_type == kDLCUDA) plugins::wait_stream(first.device_id, args.stream);
  const CheckedRound round = check_round(args.patches, &read_device, default_copy_threads(),
                                         pack_host_rounds_ ? &packed_ : nullptr);
  const auto& patches = round.patches;  // as checked: read once from the caller's structs
  if (round.cuda_device != info_.cuda_device())
    fail(WT_ERR_INVALID_ARGUMENT,
         "the patches are in {} memory, but this engine moves {} (init info device \"{}\")",
         round.cuda_device < 0 ? "host" : "CUDA", info_.cuda_device() < 0 ? "host" : "CUDA",
         info_.device);
  if (group_ == nullptr || group_->broken())
    fail(WT_ERR_STATE,
         "the sparse_nccl group broke in an earlier round; create the trainer engine again");
  nlohmann::json update = {{"names", nlohmann::json::array()},
                           {"dtype_names", nlohmann::json::array()},
                           {"shapes", nlohmann::json::array()},
                           {"num_updates_list", nlohmann::json::array()}};
  for (const auto& p : patches) {
    update["names"].push_back(p.name);
    update["dtype_names"].push_back(torch_name(p.dtype));
    update["shapes"].push_back(p.full_shape);
    update["num_updates_list"].push_back(p.count);
  }
  group_->take_digests();  // the round's own only
  plugins::RoundBracket bracket(client_, aborted_, parked_, [this] {
    std::lock_guard<std::mutex> l(group_mu_);
    if (group_) group_->abort();
  });
  bracket.run(
      update.dump(),
      [&](plugins::RoundBracket::Round& r) {
        if (round.packed) {
          r.before_collective();
          group_->broadcast(
              packed_.data(), packed_.layout().bytes, {kDLUInt, 8, 1}, 0,
              "broadcast of the round's " + std::to_string(patches.size()) + " patches (packed)");
          return;
        }
        for (const auto& p : patches) {  // vLLM's wire: per patch, indices then values
          if (aborted_.aborted())
            fail(WT_ERR_ABORTED, "the sparse_nccl trainer engine was aborted");
          const auto n = static_cast<std::size_t>(p.count);
          r.before_collective();
          group_->broadcast(const_cast<void*>(p.indices), 4 * n, {kDLInt, 32, 1}, 0,
                            "broadcast of the indices of '" + p.name + "'");
          group_->broadcast(const_cast<void*>(p.values), element_size(p.dtype) * n, p.dtype, 0,
                            "broadcast of the values of '" + p.name + "'");
        }
      },
      [&](bool collective_started) {
        if (collective_started) {
          std::lock_guard<std::mutex> l(group_mu_);
          plugins::retire_broken(group_, retired_);
        }
      },
      args.weight_version, [this] { return plugins::round_verification(group_.get()); });
  // The broadcasts are done with the patches' memory (each waited for its stream): the caller may
  // free or rebuild them now.
}

}  // namespace wt::sparse
