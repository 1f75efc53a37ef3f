// One trainer rank of `wt launch`, run as its own process. It reports to the coordinator with JSON
// lines on stdout: {"event":"progress",...} (rank 0, a few per second), {"event":"round",...} and
// {"event":"error",...}.
#pragma once

#include "cluster_place.hpp"
#include "launch_config.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace wt::cli {

struct TrainerRankArgs {
  int rank = 0;
  std::vector<std::string> receiver_urls;  // every call goes to all (wt::FanOutClient)
  std::string rendezvous_dir;  // the trainer group of ranks the coordinator started on this host
  std::vector<std::string> checkpoint_files;
  // A rank a cluster launcher started (`--rank-from-env`): its rank and world size, and the
  // trainer group it joins across hosts instead of the rendezvous directory.
  const ClusterPlace* cluster = nullptr;
  // Where the events go (one call at a time); default: a JSON line each on stdout.
  std::function<void(const nlohmann::json&)> on_event;
};

int run_trainer_rank(const LaunchConfig& cfg, const TrainerRankArgs& args);

}  // namespace wt::cli
