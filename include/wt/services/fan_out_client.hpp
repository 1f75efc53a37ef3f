// One Client over several inference deployments (replicas) at once, as `wt launch` uses for
// several receivers.
//
// Every call goes to all replicas concurrently and returns when all have answered: a collective
// backend's workers return from init (or an update) only once every rank has joined, so calling
// the replicas one after another would deadlock. A failure is reported once all have answered,
// the first by replica order, prefixed with the replica's name; its code is kept.
//
// init_weight_transfer_engine gives each replica its own ranks: where the init info carries
// `rank_offset`, replica i gets that offset plus the world sizes of replicas 0..i-1. (vLLM hands
// every deployment the same offset, so their ranks collide in one group.)
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/client.hpp>

#include <string>
#include <vector>

namespace wt {

class FanOutClient final : public Client {
 public:
  struct Replica {
    Client* client = nullptr;  // not owned; outlives this object
    int world_size = 1;        // its workers (GET /get_world_size)
    std::string name;          // for errors, e.g. its URL
  };
  explicit FanOutClient(std::vector<Replica> replicas);

  // The replicas' workers together.
  int world_size() const;

  void init_weight_transfer_engine(std::string_view init_info_json) override;
  void start_weight_update() override;
  void update_weights(std::string_view update_info_json) override;
  void finish_weight_update(const std::optional<std::string>& weight_version) override;
  void end_weight_update(std::string_view reason) override;
  void abort_calls() override;
  void abandon_calls() override;

 private:
  std::vector<Replica> replicas_;
};

}  // namespace wt
