#include "cluster_trainer_group.hpp"

#include "gloo_mesh.hpp"

#include <wt/error.hpp>
#include <wt/services/gloo_trainer_group.hpp>

#include <fmt/format.h>

#include <cstdio>

namespace wt::cli {

std::unique_ptr<TrainerGroup> join_cluster_trainer_group(
    const ClusterPlace& place, std::chrono::milliseconds join_timeout,
    std::chrono::milliseconds collective_timeout) {
  plugins::CommunicatorOptions o;
  o.master_address = place.group_address;
  o.master_port = place.group_port;
  o.rank = place.rank;
  o.world_size = place.world_size;
  o.rendezvous_timeout = join_timeout;
  o.transfer_timeout = collective_timeout;
  o.session_secret = place.secret_hex;
  // Strangers on the store's port: said, not fatal (the store drops them).
  o.warn = [](const std::string& what) {
    fmt::print(stderr, "wt launch: trainer group: {}\n", what);
  };
  try {
    return make_gloo_trainer_group(plugins::form_gloo_mesh(o, nullptr), collective_timeout);
  } catch (const sdk::Error& e) {
    throw Error(e.code(), fmt::format("trainer group: {}", e.what()));
  }
}

}  // namespace wt::cli
