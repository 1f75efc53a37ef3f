// The nccl host path across real processes: `wt serve` receivers and wt_test_trainer command
// lines meeting at 127.0.0.1, with one transfer deadline on every side.
#pragma once

#include "subprocess.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace wt::test {

struct Served {
  std::unique_ptr<cli::Child> process;
  std::string url;
};

inline Served serve_receiver(const std::string& backend, int transfer_s) {
  const nlohmann::json config = {
      {"backend", backend}, {"rendezvous_timeout_s", 20}, {"transfer_timeout_s", transfer_s}};
  auto [child, url] = cli::start_server(WT_CLI_PATH, {"--weight-transfer-config", config.dump()});
  return {std::move(child), url};
}

// wt_test_trainer --backend nccl sending to every receiver (world size 1 + receivers).
inline std::vector<std::string> nccl_trainer(const std::vector<Served*>& receivers, int port,
                                             int rounds, int transfer_s,
                                             std::vector<std::string> extra = {}) {
  const nlohmann::json init = {{"master_address", "127.0.0.1"},
                               {"master_port", port},
                               {"world_size", 1 + static_cast<int>(receivers.size())},
                               {"rendezvous_timeout_s", 20},
                               {"transfer_timeout_s", transfer_s}};
  std::vector<std::string> argv{WT_TEST_TRAINER_PATH,  "--backend", "nccl",
                                "--init-info",         init.dump(), "--rounds",
                                std::to_string(rounds)};
  for (auto* r : receivers) argv.insert(argv.end(), {"--url", r->url});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

}  // namespace wt::test
