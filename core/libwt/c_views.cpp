// The C views (wt_client, wt_weight_source, wt_trainer_group) of the C++ host objects. Each slot
// is a trampoline that turns exceptions into a status plus the message in the caller's buffer.
#include <wt/client.hpp>
#include <wt/trainer_group.hpp>
#include <wt/weight_source.hpp>

#include "abi2_sizes.hpp"
#include "internal.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace wt {

void Client::end_weight_update(std::string_view reason) {
  try {
    update_weights(nlohmann::json{{"wt_end_weight_update", std::string(reason)}}.dump());
  } catch (const Error&) {
    // Expected: the refusal is what ends the session.
  }
}

const wt_client* Client::c_client() {
  c_.struct_size = sizeof(wt_client);
  c_.abi_version = WT_ABI_VERSION;
  c_.ctx = this;
  c_.init_weight_transfer_engine = [](void* ctx, const char* json, char* err, size_t cap) {
    return host_guard(err, cap,
                      [&] { static_cast<Client*>(ctx)->init_weight_transfer_engine(json); });
  };
  c_.start_weight_update = [](void* ctx, char* err, size_t cap) {
    return host_guard(err, cap, [&] { static_cast<Client*>(ctx)->start_weight_update(); });
  };
  c_.update_weights = [](void* ctx, const char* json, char* err, size_t cap) {
    return host_guard(err, cap, [&] { static_cast<Client*>(ctx)->update_weights(json); });
  };
  c_.finish_weight_update = [](void* ctx, const char* version, char* err, size_t cap) {
    return host_guard(err, cap, [&] {
      std::optional<std::string> v;
      if (version != nullptr) v = version;
      static_cast<Client*>(ctx)->finish_weight_update(v);
    });
  };
  c_.end_weight_update = [](void* ctx, const char* reason, char* err, size_t cap) {
    return host_guard(err, cap, [&] {
      static_cast<Client*>(ctx)->end_weight_update(reason != nullptr ? reason : "");
    });
  };
  c_.abandon_calls = [](void* ctx) {
    try {
      static_cast<Client*>(ctx)->abandon_calls();
    } catch (...) {  // the slot never fails: what it could not interrupt ends by its deadline
    }
  };
  return &c_;
}

void WeightSource::set_streaming(bool on) {
  streaming_ = on;
  c_.flags = on ? WT_SOURCE_RELEASES_EACH_TENSOR : 0;
}

const wt_weight_source* WeightSource::c_source() {
  c_.struct_size = sizeof(wt_weight_source);
  c_.abi_version = WT_ABI_VERSION;
  c_.flags = streaming_ ? WT_SOURCE_RELEASES_EACH_TENSOR : 0;
  c_.ctx = this;
  c_.metadata = [](void* ctx, const wt_param_meta** params, size_t* count, char* err, size_t cap) {
    return host_guard(err, cap, [&] {
      auto* self = static_cast<WeightSource*>(ctx);
      const auto& meta = self->metadata();
      self->c_meta_.resize(meta.size());
      for (std::size_t i = 0; i < meta.size(); ++i) self->c_meta_[i] = c_param_meta(meta[i]);
      *params = self->c_meta_.data();
      *count = self->c_meta_.size();
    });
  };
  c_.begin = [](void* ctx, char* err, size_t cap) {
    return host_guard(err, cap, [&] { static_cast<WeightSource*>(ctx)->begin(); });
  };
  c_.next = [](void* ctx, wt_tensor* out, int32_t* done, char* err, size_t cap) {
    return host_guard(err, cap, [&] {
      wt_tensor t{};
      if (static_cast<WeightSource*>(ctx)->next(t)) {
        // Rule 2: no byte beyond the caller's struct_size (an older plugin's smaller struct).
        if (out->struct_size < abi2::kTensorSize)
          throw Error(WT_ERR_INVALID_ARGUMENT,
                      fmt::format("next(): the caller's wt_tensor has struct_size {}, too small "
                                  "for ABI 2's {} bytes",
                                  out->struct_size, abi2::kTensorSize));
        const std::size_t n = std::min<std::size_t>(out->struct_size, sizeof t);
        t.struct_size = static_cast<uint32_t>(n);
        t.abi_version = WT_ABI_VERSION;
        std::memcpy(out, &t, n);
        *done = 0;
      } else {
        *done = 1;
      }
    });
  };
  c_.end = [](void* ctx) {
    try {
      static_cast<WeightSource*>(ctx)->end();
    } catch (...) {
    }
  };
  return &c_;
}

const wt_trainer_group* TrainerGroup::c_group() {
  c_.struct_size = sizeof(wt_trainer_group);
  c_.abi_version = WT_ABI_VERSION;
  c_.ctx = this;
  c_.rank = rank();
  c_.size = size();
  c_.all_gather = [](void* ctx, const void* data, size_t len, wt_bytes_sink sink, void* sink_ctx,
                     char* err, size_t cap) {
    return host_guard(err, cap, [&] {
      auto all = static_cast<TrainerGroup*>(ctx)->all_gather(
          std::string_view(static_cast<const char*>(data), len));
      for (std::size_t r = 0; r < all.size(); ++r)
        sink(sink_ctx, static_cast<int32_t>(r), all[r].data(), all[r].size());
    });
  };
  c_.barrier = [](void* ctx, char* err, size_t cap) {
    return host_guard(err, cap, [&] { static_cast<TrainerGroup*>(ctx)->barrier(); });
  };
  return &c_;
}

}  // namespace wt
