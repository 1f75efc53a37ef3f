// The worker ranks of one inference deployment, as the reference receiver stands in for a
// tensor-parallel group (`wt serve --tensor-parallel-size T`): T worker ranks, each a Receiver
// with its own worker engine, holding only what the trainer sends that rank (its TP slice under
// m2n's plan). /get_world_size answers T, as vLLM answers TP × PP × DP.
//
// The control calls reach every rank, as vLLM's collective_rpc reaches every worker:
//   - init: rank k is given the init info with rank_offset + k (the info has no rank_offset, as
//     ipc's: every rank gets it as it is). The ranks initialise at once, since a collective
//     backend's ranks rendezvous together.
//   - update: one update_info object goes to every rank; a list gives rank k its element k. The
//     ranks receive at once; when one fails, the others are aborted, and the failure reported is
//     that rank's, named ("tensor-parallel rank 1 of 2: ...").
//   - finish: every rank's engine finishes first; only when all did is any round committed, so a
//     failed round changes no rank's weights (all ranks or none).
//   - start and finish reach the ranks one after another: a backend whose start or finish waits
//     for its other worker ranks (a collective) would wait for ever here; the built-in ones
//     do not.
// The weight version is the group's (every rank's is set together). Readers may see the ranks of
// a round being committed one after the other (rank 0 first).
// The ranks share the host's memory and device: a group of several ranks is refused on a GPU.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/services/receiver.hpp>
#include <wt/services/weight_routes.hpp>

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace wt {

class ReceiverGroup final : public WeightRoutes {
 public:
  static constexpr int kMaxRanks = 64;
  // `ranks` receivers (1..kMaxRanks) made from `options`; its load threads are shared out among
  // them (each at least one), and so is expect_model_bytes (each rank holds about 1/ranks).
  ReceiverGroup(const Receiver::Options& options, int ranks);
  // A group of one: `one`, borrowed (it must outlive the group).
  explicit ReceiverGroup(Receiver& one);
  ~ReceiverGroup() override;
  ReceiverGroup(const ReceiverGroup&) = delete;
  ReceiverGroup& operator=(const ReceiverGroup&) = delete;

  int world_size() const override { return static_cast<int>(ranks_.size()); }
  Receiver& rank(int k) { return *ranks_.at(static_cast<std::size_t>(k)); }
  const Receiver& rank(int k) const { return *ranks_.at(static_cast<std::size_t>(k)); }

  // The control-plane calls (as Receiver's; errors name the rank when there are several).
  void init_weight_transfer_engine(nlohmann::json init_info) override;
  void start_weight_update() override;
  void update_weights(nlohmann::json update_info) override;
  void finish_weight_update(const std::optional<std::string>& weight_version) override;
  void end_weight_update(const std::string& reason) override;
  // Refused while a session is active on any rank, and with several ranks (a rank's slice of a
  // checkpoint depends on the layout the trainer ships at init).
  void load_base(WeightSource& source);

  const std::string& backend() const override { return ranks_.front()->backend(); }
  unsigned load_threads() const;
  std::optional<std::string> weight_version() const override {
    return ranks_.front()->weight_version();
  }
  void set_weight_version(const std::string& version) override;
  bool session_active() const override;
  // Per rank, name -> XXH3-64 hex of what that rank holds.
  std::vector<std::map<std::string, std::string>> checksums_by_rank() const override;

 private:
  // Runs f(k) for every rank, on a thread each when there are several; after every call returned,
  // throws the first error (in time), naming its rank. With abort_others_on_failure, the first
  // failure ends the other ranks' updates at once, from the failing call's thread.
  template <class F>
  void on_every_rank(F&& f, bool abort_others_on_failure);
  std::string who(int k) const;  // "" with one rank, else "tensor-parallel rank k of T: "
  // Ends every rank's update but `failed`'s (-1: all): their engines aborted first, then each
  // session ended. Never throws.
  void end_others(int failed, const std::string& reason) noexcept;
  void join_inits();  // the threads of an earlier init that answered at its first refusal

  std::vector<std::unique_ptr<Receiver>> owned_;
  std::vector<Receiver*> ranks_;
  std::mutex mu_;  // serialises the control calls of the group
  std::vector<std::thread> init_threads_;
  // The last init failed on some rank (its message): start is refused until an init succeeds.
  std::optional<std::string> init_failed_;
};

}  // namespace wt
