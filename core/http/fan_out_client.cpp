#include <wt/services/fan_out_client.hpp>

#include <wt/sdk/rank_keys.hpp>

#include <wt/error.hpp>
#include <wt/json_parse.hpp>

#include <fmt/format.h>

#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace wt {

namespace {

// Runs call(i) for every replica at once (the last on this thread) and waits for all; then
// rethrows the first failure by index, naming the replica. With `fail_fast`, the first failure
// interrupts the others' calls in flight (their receivers wait inside a collective that will
// not complete without the one that failed), and the failure reported is the one that came
// first, not the interruptions it caused.
void on_all(const std::vector<FanOutClient::Replica>& replicas,
            const std::function<void(std::size_t)>& call, bool fail_fast = false) {
  if (replicas.size() == 1) return call(0);  // one deployment: its own words
  std::vector<std::exception_ptr> errors(replicas.size());
  std::mutex mu;
  std::optional<std::size_t> first;  // the replica whose failure came first
  auto run = [&](std::size_t i) {
    try {
      call(i);
    } catch (...) {
      errors[i] = std::current_exception();
      if (!fail_fast) return;
      {
        std::lock_guard<std::mutex> l(mu);
        if (first) return;
        first = i;
      }
      for (std::size_t j = 0; j < replicas.size(); ++j)
        if (j != i) replicas[j].client->abort_calls();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(replicas.size() - 1);
  for (std::size_t i = 0; i + 1 < replicas.size(); ++i) threads.emplace_back(run, i);
  run(replicas.size() - 1);
  for (auto& t : threads) t.join();
  auto rethrow = [&](std::size_t i) {
    const std::string who =
        fmt::format("receiver {} of {} ({})", i + 1, replicas.size(), replicas[i].name);
    try {
      std::rethrow_exception(errors[i]);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("{}: {}", who, e.what()));
    } catch (const std::exception& e) {
      throw Error(WT_ERR_INTERNAL, fmt::format("{}: {}", who, e.what()));
    }
  };
  if (first) rethrow(*first);
  for (std::size_t i = 0; i < errors.size(); ++i)
    if (errors[i]) rethrow(i);
}

}  // namespace

FanOutClient::FanOutClient(std::vector<Replica> replicas) : replicas_(std::move(replicas)) {
  if (replicas_.empty()) throw Error(WT_ERR_INVALID_ARGUMENT, "a fan-out client needs a replica");
  for (const auto& r : replicas_) {
    if (r.client == nullptr)
      throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("replica '{}' has no client", r.name));
    if (r.world_size < 1)
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("replica '{}' reports world size {}", r.name, r.world_size));
  }
}

int FanOutClient::world_size() const {
  int n = 0;
  for (const auto& r : replicas_) n += r.world_size;
  return n;
}

void FanOutClient::init_weight_transfer_engine(std::string_view init_info_json) {
  std::vector<std::string> texts(replicas_.size(), std::string(init_info_json));
  // Several replicas, or one that must not see keys of ranks it does not hold (rank_keys.hpp).
  if (replicas_.size() > 1 || init_info_json.find(sdk::kRankKeysField) != std::string_view::npos) {
    nlohmann::json info;
    try {
      info = parse_json(init_info_json);
    } catch (const JsonError& e) {
      throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("init_info: {}", e.what()));
    }
    if (info.is_object() && info.contains("rank_offset") &&
        info["rank_offset"].is_number_integer()) {
      int64_t offset = info["rank_offset"].get<int64_t>();
      for (std::size_t i = 0; i < replicas_.size(); ++i) {
        nlohmann::json mine = info;
        mine["rank_offset"] = offset;
        sdk::keep_rank_keys(mine, offset, replicas_[i].world_size);
        texts[i] = mine.dump();
        offset += replicas_[i].world_size;
      }
    }
  }
  on_all(replicas_,
         [&](std::size_t i) { replicas_[i].client->init_weight_transfer_engine(texts[i]); });
}

void FanOutClient::start_weight_update() {
  // A round that one replica refused is over: the replicas that started it are ended at once
  // (no round bracket ends a round whose start failed), not left mid-update until the next
  // trainer_init.
  std::vector<char> started(replicas_.size(), 0);
  try {
    on_all(replicas_, [&](std::size_t i) {
      replicas_[i].client->start_weight_update();
      started[i] = 1;
    });
  } catch (const Error& e) {
    std::vector<Replica> ended;
    for (std::size_t i = 0; i < replicas_.size(); ++i)
      if (started[i]) ended.push_back(replicas_[i]);
    if (!ended.empty()) {
      const std::string reason = fmt::format("start_weight_update failed on {}", e.what());
      try {
        on_all(ended, [&](std::size_t i) { ended[i].client->end_weight_update(reason); });
      } catch (const Error&) {  // the refusal is the round's error; an end that failed is not
      }
    }
    throw;
  }
}

void FanOutClient::update_weights(std::string_view update_info_json) {
  on_all(
      replicas_, [&](std::size_t i) { replicas_[i].client->update_weights(update_info_json); },
      true);
}

void FanOutClient::finish_weight_update(const std::optional<std::string>& weight_version) {
  on_all(replicas_,
         [&](std::size_t i) { replicas_[i].client->finish_weight_update(weight_version); });
}

void FanOutClient::end_weight_update(std::string_view reason) {
  on_all(replicas_, [&](std::size_t i) { replicas_[i].client->end_weight_update(reason); });
}

void FanOutClient::abandon_calls() {
  for (auto& r : replicas_) r.client->abandon_calls();
}

void FanOutClient::abort_calls() {
  for (auto& r : replicas_) r.client->abort_calls();
}

}  // namespace wt
