// The check `wt conformance` judges itself: a plugin runs its other checks in a child process and
// could, being native code there, write any verdict into the channel the checks report through.
// So the run's pass needs evidence that no process holding the plugin can make up: the judge
// makes a checkpoint of its own (a seed only it knows until the round), starts a worker (`wt
// serve`) and a trainer process on the plugin file through the production registry, and compares
// the bytes the worker then holds with what it computes from that checkpoint itself.
#pragma once

#include "conformance.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace wt::cli::conformance {

struct WitnessResult {
  Outcome outcome = Outcome::fail;
  std::string detail;
};

// In `wt conformance` itself (which never loads the plugin). `deadline_s` bounds the whole check.
WitnessResult run_witness(const Options& options, int deadline_s);

// The witness's processes: `wt conformance PLUGIN --witness-probe` loads the plugin and prints its
// capabilities; `wt conformance PLUGIN --witness-for URL --witness-world-size N --witness-seed S
// --checkpoint FILE... [--init-info JSON]` sends one round of that checkpoint, changed by the
// training step of seed S, to the worker at URL.
struct WitnessTrainer {
  std::string plugin, url;
  nlohmann::json init_info = nlohmann::json::object();
  int worker_world_size = 1;
  uint64_t seed = 0;
  std::vector<std::string> checkpoint;
  bool probe = false;
};
int run_witness_trainer(const WitnessTrainer& w);

}  // namespace wt::cli::conformance
