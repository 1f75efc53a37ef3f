// The ipc trainer init info:
//   rank                      int, required: 0 is the sender
//   packed                    bool, default false: copy tensors into shared buffers
//   packed_buffer_size_bytes  int, default 1 GiB: the size of each buffer (the model's packed
//                             size where that is less)
//   packed_num_buffers        int, default 2: buffers in rotation, so packing the next buffer
//                             overlaps the worker loading the previous one
//   copy_threads              int, default 0 (one per core, at most 8): threads that copy host
//                             tensors into a packed buffer
//   packed_alignment          int, default 256: every packed tensor starts at a multiple of it
//                             (DLPack's promise; a kernel on a misaligned view faults). 1 packs
//                             back to back, as vLLM does: use it with a stock vLLM receiver, whose
//                             init payload has no such key.
// `packed` travels to the worker, and `packed_alignment` when packed and not 1; the rest is the
// trainer's business.
#pragma once

#include "../common/packed_options.hpp"

#include <wt/sdk/plugin.hpp>

namespace wt::ipc {

struct IpcInitInfo final : sdk::InitInfoBase {
  int64_t rank_ = 0;
  bool packed = false;
  int64_t packed_buffer_size_bytes = int64_t{1} << 30;
  int64_t packed_num_buffers = 2;
  int64_t copy_threads = 0;
  int64_t packed_alignment = 256;

  nlohmann::json to_json() const override {
    return {{"rank", rank_},
            {"packed", packed},
            {"packed_buffer_size_bytes", packed_buffer_size_bytes},
            {"packed_num_buffers", packed_num_buffers},
            {"copy_threads", copy_threads},
            {"packed_alignment", packed_alignment}};
  }
  int64_t rank() const override { return rank_; }
  // What the sender ships through init_weight_transfer_engine.
  // vLLM's payload exactly, unless packed tensors are aligned (which a wt worker must know).
  nlohmann::json worker_init_info() const {
    nlohmann::json j = {{"packed", packed}};
    if (packed && packed_alignment != 1) j["packed_alignment"] = packed_alignment;
    return j;
  }

  static std::unique_ptr<sdk::InitInfoBase> parse(const nlohmann::json& fields) {
    sdk::FieldReader r(fields, "init_info for backend 'ipc'");
    auto info = std::make_unique<IpcInitInfo>();
    info->rank_ = r.get_int("rank");
    const auto packing =
        plugins::PackedOptions::read(r, {false, info->packed_buffer_size_bytes, 2});
    info->packed = packing.packed;
    info->packed_buffer_size_bytes = packing.buffer_bytes;
    info->packed_num_buffers = packing.num_buffers;
    info->copy_threads = r.opt_int("copy_threads", 0);
    info->packed_alignment = r.opt_int("packed_alignment", 256);
    r.finish();
    if (info->rank_ < 0)
      sdk::fail_field("rank", WT_ERR_INVALID_ARGUMENT, "invalid {}: field 'rank' must be >= 0",
                      r.what());
    packing.check(r.what());
    if (info->packed_alignment < 1 || info->packed_alignment > 4096 ||
        (info->packed_alignment & (info->packed_alignment - 1)) != 0)
      sdk::fail_field("packed_alignment", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'packed_alignment' must be a power of two in 1..4096",
                      r.what());
    if (info->copy_threads < 0 || info->copy_threads > 256)
      sdk::fail_field("copy_threads", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'copy_threads' must be in 0..256", r.what());
    return info;
  }
};

}  // namespace wt::ipc
