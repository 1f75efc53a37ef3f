// The init info's world_size, counted from the receivers when the info leaves it out: the
// trainer (rank 0) plus every worker rank behind the receivers (each one's GET /get_world_size),
// for the backends that count their ranks (a rendezvous at master_address, or an NCCL domain on
// device "cuda:N"). `wt launch` and the Python package fill it alike.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <nlohmann/json.hpp>

#include <string>

namespace wt {

// Whether `init_info` (an object) should get world_size from its receivers.
inline bool world_size_from_receivers(const nlohmann::json& init_info) {
  if (!init_info.is_object() || init_info.contains("world_size")) return false;
  const auto device = init_info.find("device");
  return init_info.contains("master_address") ||
         (device != init_info.end() && device->is_string() &&
          device->get<std::string>().rfind("cuda:", 0) == 0);
}

// 1 (the sending trainer rank) + the receivers' worker ranks.
inline int world_size_of(int receivers_world) {
  return 1 + receivers_world;
}

}  // namespace wt
