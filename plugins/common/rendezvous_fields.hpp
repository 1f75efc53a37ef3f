// The rendezvous fields the nccl and sparse_nccl trainer init infos share (vLLM's names):
// master_address, master_port, world_size (trainer sender + every worker), and the caller's rank.
// Header-only, compiled into each plugin that uses it.
#pragma once

#include <wt/sdk/json_fields.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace wt::plugins {

struct RendezvousFields {
  std::string master_address;
  int64_t master_port = 0;
  int64_t world_size = 0;
  int64_t rank = 0;

  // Reads and validates the four fields; errors name the field. Without `need_address` (NCCL's
  // unique-id mode has no store to meet at) master_address and master_port may be left out.
  static RendezvousFields read(sdk::FieldReader& r, bool need_address = true) {
    RendezvousFields f;
    if (!need_address && !r.has("master_address") && !r.has("master_port")) {
      f.world_size = r.get_int("world_size");
      f.rank = r.get_int("rank");
      f.check(r, false);
      return f;
    }
    f.master_address = r.get_string("master_address");
    f.master_port = r.get_int("master_port");
    f.world_size = r.get_int("world_size");
    f.rank = r.get_int("rank");
    f.check(r, true);
    return f;
  }

  void check(const sdk::FieldReader& r, bool with_address) const {
    const auto& f = *this;
    if (with_address && (f.master_port < 1 || f.master_port > 65535))
      sdk::fail_field("master_port", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'master_port' must be in 1..65535, got {}", r.what(),
                      f.master_port);
    if (f.world_size < 2)
      sdk::fail_field(
          "world_size", WT_ERR_INVALID_ARGUMENT,
          "invalid {}: field 'world_size' must be at least 2 (the trainer plus one worker), got {}",
          r.what(), f.world_size);
    if (f.rank < 0)
      sdk::fail_field("rank", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'rank' must be >= 0, got {}", r.what(), f.rank);
  }

  // The optional `device` field: "cpu" (host memory over Gloo, the default) or "cuda:N" (CUDA
  // memory over NCCL on device N).
  static std::string read_device(sdk::FieldReader& r) {
    std::string d = r.opt_string("device", "cpu");
    if (d != "cpu" && !(d.rfind("cuda:", 0) == 0 && d.size() > 5 && d.size() < 9 &&
                        d.find_first_not_of("0123456789", 5) == std::string::npos))
      sdk::fail_field("device", WT_ERR_INVALID_ARGUMENT,
                      "invalid {}: field 'device' must be \"cpu\" or \"cuda:N\", got \"{}\"",
                      r.what(), d);
    return d;
  }
  // -1 for "cpu", else N of "cuda:N" (as read_device checked it).
  static int cuda_device(const std::string& device) {
    return device == "cpu" ? -1 : std::stoi(device.substr(5));
  }

  // The worker init info the sender ships (vLLM's keys): rank_offset 1, world_size and the packed
  // parameters, with the address and port (Gloo) or the NCCL unique id of a CUDA domain.
  nlohmann::json worker_init_info(const std::optional<std::string>& unique_id, bool packed,
                                  int64_t packed_buffer_size_bytes,
                                  int64_t packed_num_buffers) const {
    nlohmann::json j = {{"rank_offset", 1},
                        {"world_size", world_size},
                        {"packed", packed},
                        {"packed_buffer_size_bytes", packed_buffer_size_bytes},
                        {"packed_num_buffers", packed_num_buffers}};
    if (unique_id) {
      j["nccl_unique_id_b64"] = *unique_id;
    } else {
      j["master_address"] = master_address;
      j["master_port"] = master_port;
    }
    return j;
  }

  nlohmann::json to_json() const {
    nlohmann::json j = {{"world_size", world_size}, {"rank", rank}};
    if (!master_address.empty()) {
      j["master_address"] = master_address;
      j["master_port"] = master_port;
    }
    return j;
  }
};

}  // namespace wt::plugins
