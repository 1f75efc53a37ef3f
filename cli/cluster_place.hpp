// Where one trainer rank of `wt launch CONFIG --rank-from-env` sits in its job and where its
// trainer group meets, resolved from the config first, then the cluster launcher's variables
// (launcher_env.hpp); and the address checks that keep a job from advertising a loopback address
// to another host. docs/cluster.md describes both.
#pragma once

#include "launch_config.hpp"
#include "launcher_env.hpp"

#include <string>
#include <vector>

namespace wt::cli {

struct ClusterPlace {
  LauncherPlace launcher;  // what the launcher's variables said
  int rank = 0, world_size = 1, local_rank = 0;
  // Trainer rank 0 hosts the trainer group's rendezvous store at group_address:group_port; every
  // rank's pairs listen on the local address routing there (what it advertises to the others).
  std::string group_address, group_address_from;  // from: "trainer.group_address", "MASTER_ADDR"…
  int group_port = 0;
  // The group's shared secret (hex, 64 digits) for a world of several ranks, and where it came
  // from ("trainer.secret_file (PATH)" or "WT_TRAINER_SECRET").
  std::string secret_hex, secret_from;
};

// Throws wt::Error (WT_ERR_INVALID_ARGUMENT) naming both sides where the config and the launcher
// disagree (trainer.ranks against the launcher's world size, trainer.group_port on MASTER_PORT),
// where no launcher is found, where rank 0's host is unknown or resolves to a loopback address
// while the ranks span hosts, and where several ranks have no secret to share.
ClusterPlace resolve_cluster_place(const LaunchConfig& cfg, const Getenv& getenv);

// The same resolution for `--dry-run`: every problem is recorded in `problems`, in the order found,
// instead of thrown, and the resolution goes on with what does not depend on it, so that a dry run
// shows all it resolved beside what is wrong.
ClusterPlace resolve_cluster_place(const LaunchConfig& cfg, const Getenv& getenv,
                                   std::vector<std::string>& problems);

// The lines `--dry-run` prints and a rank logs when it starts.
std::vector<std::string> describe(const ClusterPlace& place);

// The numeric addresses `host` resolves to (empty when it does not resolve).
std::vector<std::string> resolve_addresses(const std::string& host);
bool is_loopback_address(const std::string& numeric);
// "http://host:port/..." → host (IPv6 without its brackets); empty when the URL has none.
std::string url_host(const std::string& url);

// A rendezvous the receivers' workers dial (init_info.master_address) that resolves to loopback
// only, while a receiver is on another host, is refused naming the key's line, the address and
// that receiver: its workers could never reach it.
void check_rendezvous_reaches_receivers(const LaunchConfig& cfg,
                                        const std::vector<std::string>& receiver_urls);

}  // namespace wt::cli
