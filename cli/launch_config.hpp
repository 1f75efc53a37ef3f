// The `wt launch` configuration: one YAML file, parsed strictly. Every error names the file, the
// line and the key. docs/config.md documents the schema.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace wt::cli {

struct LaunchConfig {
  std::string file;

  std::string backend;
  nlohmann::json init_info =
      nlohmann::json::object();  // without rank: wt launch sets it per process
  std::map<std::string, std::pair<int, int>> init_info_marks;  // key -> (line, column), 1-based

  int trainer_ranks = 1;
  bool trainer_ranks_given = false;  // written in the file (a launcher's world size must agree)
  double group_timeout_s = 60;
  // Under a cluster launcher (`--rank-from-env`, docs/cluster.md): where trainer rank 0 hosts the
  // trainer group's rendezvous (empty: the launcher's MASTER_ADDR or first SLURM host), on which
  // port (never the launcher's MASTER_PORT), and a file holding the group's secret (empty:
  // $WT_TRAINER_SECRET).
  std::string group_address;
  int group_port = 29510;
  std::string secret_file;
  // Each trainer process reads the checkpoint into /dev/shm instead of mapping it copy-on-write.
  bool weights_in_shared_memory = false;

  // Source: exactly one of these.
  std::vector<std::string> safetensors;
  struct Generate {
    std::string model = "qwen2.5-0.5b";
    std::string dtype = "bfloat16";
    uint32_t seed = 0;
    int shards = 1;
    std::string dir;  // default: the cache directory
  };
  std::optional<Generate> generate;
  // source.shard: {rank_of: trainer, dim: D}: each trainer rank sends only its slice.
  std::optional<int> shard_dim;

  // Receivers: `receiver_count` embedded `wt serve`s, or the deployments at receiver_urls. Every
  // control-plane call goes to all of them (wt::FanOutClient).
  bool embedded_receiver = true;
  int receiver_count = 1;
  // Worker ranks of each embedded receiver (`wt serve --tensor-parallel-size`).
  int receiver_tensor_parallel_size = 1;
  std::vector<std::string> receiver_urls;
  std::string receiver_token;
  double receiver_timeout_s = 300;
  std::string receiver_device = "cpu";

  int rounds = 3;
  double perturb_fraction = 0.01;
  uint32_t perturb_seed = 1;
  bool verify = true;
  std::vector<std::string> plugin_dirs;
};

// Throws wt::Error (WT_ERR_INVALID_ARGUMENT) with "<file>:<line>:<col>: ..." messages.
LaunchConfig load_launch_config(const std::string& path);

// Re-validates the init info (init_info_for) with the backend's own parser, reporting errors at
// the YAML line of the offending key.
void validate_init_info(const LaunchConfig& cfg, const std::vector<int>& receiver_world_sizes);

// Whether the init info's world_size is to be counted from the receivers' (it has none, and the
// backend meets at a rendezvous address or in a CUDA domain).
bool world_size_from_receivers(const LaunchConfig& cfg);

// The init info a trainer rank sends, given the receivers' world sizes: a backend with a
// rendezvous (master_address) and no world_size gets 1 (the sender) + their sum.
nlohmann::json init_info_for(const LaunchConfig& cfg, const std::vector<int>& receiver_world_sizes);

// Where a generated checkpoint lives: generate.dir, or $WT_CACHE_DIR / $XDG_CACHE_HOME/wt /
// ~/.cache/wt, under checkpoints/<model>-<dtype>-seed<seed>-<shards>.
std::string generated_checkpoint_dir(const LaunchConfig::Generate& g);

}  // namespace wt::cli
