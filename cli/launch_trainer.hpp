// One trainer rank of `wt launch`, run as its own process. It reports to the coordinator with JSON
// lines on stdout: {"event":"progress",...} (rank 0, a few per second), {"event":"round",...} and
// {"event":"error",...}.
#pragma once

#include "launch_config.hpp"

#include <string>
#include <vector>

namespace wt::cli {

struct TrainerRankArgs {
  int rank = 0;
  std::vector<std::string> receiver_urls;  // every call goes to all (wt::FanOutClient)
  std::string rendezvous_dir;
  std::vector<std::string> checkpoint_files;
};

int run_trainer_rank(const LaunchConfig& cfg, const TrainerRankArgs& args);

}  // namespace wt::cli
