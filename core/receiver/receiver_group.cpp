#include <wt/services/receiver_group.hpp>

#include <wt/error.hpp>
#include <wt/sdk/parallel_copy.hpp>
#include <wt/sdk/rank_keys.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace wt {

namespace {

// Rethrows `e` with `prefix` before its message, keeping its code.
[[noreturn]] void rethrow_prefixed(const std::exception_ptr& e, const std::string& prefix) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    if (prefix.empty()) throw;
    throw Error(err.code(), prefix + err.what());
  } catch (const std::exception& err) {
    if (prefix.empty()) throw;
    throw Error(WT_ERR_INTERNAL, prefix + err.what());
  }
}

// A lone rank's init info keeps its own key only, whatever the trainer sent
// (<wt/sdk/rank_keys.hpp>).
void keep_own_rank_key(nlohmann::json& init_info) {
  if (auto it = init_info.find("rank_offset");
      init_info.is_object() && it != init_info.end() && it->is_number_integer())
    sdk::keep_rank_keys(init_info, it->get<int64_t>(), 1);
}

// Each rank's init info: the deployment's rank_offset plus the rank's place in the group, and the
// rank's own key only (the info as it is when it has no rank_offset).
std::vector<nlohmann::json> init_infos_by_rank(const nlohmann::json& init_info, int ranks) {
  std::vector<nlohmann::json> infos(static_cast<std::size_t>(ranks), init_info);
  if (auto it = init_info.find("rank_offset"); it != init_info.end()) {
    if (!it->is_number_integer())
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("init_info.rank_offset must be an integer, not {}", it->dump()));
    const int64_t offset = it->get<int64_t>();
    if (offset < 0 || offset > (int64_t{1} << 31) - ranks)
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("init_info.rank_offset {} is out of range for {} worker ranks",
                              offset, ranks));
    for (std::size_t k = 0; k < infos.size(); ++k) {
      infos[k]["rank_offset"] = offset + static_cast<int64_t>(k);
      sdk::keep_rank_keys(infos[k], offset + static_cast<int64_t>(k), 1);  // its own key only
    }
  }
  return infos;
}

// One multi-rank init, shared with the ranks' threads: those still running when the init has
// answered (at the first refusal) outlive its call.
struct InitRun {
  std::mutex mu;
  std::condition_variable cv;
  int left = 0;
  std::exception_ptr first;
  int first_rank = -1;

  // Under mu: the first failure is the init's answer.
  void note_failure(std::exception_ptr error, int rank) {
    if (error && !first) {
      first = error;
      first_rank = rank;
    }
  }
};

// Rank k's init, on its own thread.
void init_rank(Receiver& receiver, nlohmann::json info, InitRun& run, int k) {
  std::exception_ptr error;
  try {
    receiver.init_weight_transfer_engine(std::move(info));
  } catch (...) {
    error = std::current_exception();
  }
  std::lock_guard<std::mutex> l(run.mu);
  run.note_failure(error, k);
  --run.left;
  run.cv.notify_all();
}

// Waits until every rank's init has returned or one has failed: the first failure (null if none)
// and its rank.
std::pair<std::exception_ptr, int> wait_for_inits(InitRun& run) {
  std::unique_lock<std::mutex> done(run.mu);
  run.cv.wait(done, [&] { return run.left == 0 || run.first != nullptr; });
  return {run.first, run.first_rank};
}

}  // namespace

ReceiverGroup::ReceiverGroup(const Receiver::Options& options, int ranks) {
  if (ranks < 1 || ranks > kMaxRanks)
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("a receiver group has 1..{} worker ranks, not {}", kMaxRanks, ranks));
  if (ranks > 1 && options.device.device_type != kDLCPU)
    throw Error(WT_ERR_UNSUPPORTED,
                fmt::format("a receiver of {} worker ranks keeps them in host memory: on a GPU "
                            "each rank would need its own device (NCCL takes one GPU per rank) "
                            "and its own staging; run one receiver per GPU",
                            ranks));
  Receiver::Options per_rank = options;
  const unsigned threads = options.load_threads > 0 ? options.load_threads : default_copy_threads();
  per_rank.load_threads = std::max(1u, threads / static_cast<unsigned>(ranks));
  per_rank.expect_model_bytes = options.expect_model_bytes / static_cast<uint64_t>(ranks);
  for (int k = 0; k < ranks; ++k) {
    owned_.push_back(std::make_unique<Receiver>(per_rank));
    ranks_.push_back(owned_.back().get());
  }
}

ReceiverGroup::ReceiverGroup(Receiver& one) : ranks_{&one} {}

ReceiverGroup::~ReceiverGroup() {
  join_inits();
}

void ReceiverGroup::join_inits() {
  for (auto& t : init_threads_)
    if (t.joinable()) t.join();
  init_threads_.clear();
}

void ReceiverGroup::end_others(int failed, const std::string& reason) noexcept {
  // Every other rank's engine is aborted first, then each session is ended: the waits overlap.
  for (int j = 0; j < world_size(); ++j)
    if (j != failed) ranks_[static_cast<std::size_t>(j)]->abort_update();
  for (int j = 0; j < world_size(); ++j) {
    if (j == failed) continue;
    try {
      ranks_[static_cast<std::size_t>(j)]->end_weight_update(reason);
    } catch (...) {  // ending is best effort: the failure being reported stands
    }
  }
}

std::string ReceiverGroup::who(int k) const {
  return ranks_.size() == 1 ? std::string()
                            : fmt::format("tensor-parallel rank {} of {}: ", k, ranks_.size());
}

template <class F>
void ReceiverGroup::on_every_rank(F&& f, bool abort_others_on_failure) {
  if (ranks_.size() == 1) {
    f(0);
    return;
  }
  std::mutex first_mu;
  std::exception_ptr first;
  int first_rank = -1;
  auto run = [&](int k) {
    try {
      f(k);
    } catch (...) {
      bool mine = false;
      {
        std::lock_guard<std::mutex> l(first_mu);
        if (!first) {
          first = std::current_exception();
          first_rank = k;
          mine = true;
        }
      }
      // The first failure ends the other ranks' calls, which would otherwise wait for bytes that
      // will not come; their errors (aborted) are not the cause and are not reported.
      if (mine && abort_others_on_failure) end_others(k, who(k) + "failed; the group's round ends");
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(ranks_.size() - 1);
  try {
    for (int k = 1; k < world_size(); ++k) threads.emplace_back(run, k);
  } catch (...) {  // no thread for the rest: the started ones are ended and joined
    end_others(-1, "the receiver could not start a thread per worker rank");
    for (auto& t : threads) t.join();
    throw;
  }
  run(0);
  for (auto& t : threads) t.join();
  if (first) rethrow_prefixed(first, who(first_rank));
}

void ReceiverGroup::init_weight_transfer_engine(nlohmann::json init_info) {
  std::lock_guard<std::mutex> l(mu_);
  if (ranks_.size() == 1) {
    init_failed_.reset();
    keep_own_rank_key(init_info);
    ranks_[0]->init_weight_transfer_engine(std::move(init_info));
    return;
  }
  if (!init_info.is_object())
    throw Error(WT_ERR_INVALID_ARGUMENT, "init_info must be a JSON object");
  std::vector<nlohmann::json> infos = init_infos_by_rank(init_info, world_size());
  init_info = nullptr;
  // Every rank takes part in the backend's rendezvous at once, each on its own thread. The first
  // refusal is the answer, at once: the trainer, told, stops its rendezvous, and the ranks still
  // waiting in it fail soon after; they are joined before the next init (or at destruction), and
  // until one succeeds, start is refused.
  join_inits();
  auto run = std::make_shared<InitRun>();
  run->left = world_size();
  init_failed_ = "an init is in progress";
  for (int k = 0; k < world_size(); ++k) {
    auto work = [this, run, k, info = std::move(infos[static_cast<std::size_t>(k)])]() mutable {
      init_rank(*ranks_[static_cast<std::size_t>(k)], std::move(info), *run, k);
    };
    try {
      init_threads_.emplace_back(std::move(work));
    } catch (...) {
      std::lock_guard<std::mutex> l(run->mu);
      run->left -= world_size() - k;  // never started
      run->note_failure(std::current_exception(), k);
      break;
    }
  }
  const auto [first, rank] = wait_for_inits(*run);
  if (!first) {
    join_inits();
    init_failed_.reset();
    return;
  }
  try {
    rethrow_prefixed(first, who(rank));
  } catch (const std::exception& e) {
    init_failed_ = e.what();
    throw;
  }
}

void ReceiverGroup::start_weight_update() {
  std::lock_guard<std::mutex> l(mu_);
  if (init_failed_)
    throw Error(WT_ERR_STATE,
                fmt::format("weight transfer is not initialised on every worker rank: the last "
                            "init failed ({}); call init_weight_transfer_engine again",
                            *init_failed_));
  for (int k = 0; k < world_size(); ++k) {
    try {
      ranks_[static_cast<std::size_t>(k)]->start_weight_update();
    } catch (const Error& e) {
      end_others(k, who(k) + "could not start");  // the ranks already started: the round did not
      throw Error(e.code(), who(k) + e.what());
    }
  }
}

void ReceiverGroup::update_weights(nlohmann::json update_info) {
  std::lock_guard<std::mutex> l(mu_);
  if (ranks_.size() == 1) {
    ranks_[0]->update_weights(std::move(update_info));
    return;
  }
  if (!session_active())
    throw Error(WT_ERR_STATE, "start_weight_update must be called before update_weights.");
  // Each rank's payload as text, made once: an object is shared by every rank (each engine parses
  // it itself), a list gives rank k element k.
  std::vector<std::string> per_rank;
  if (update_info.is_array()) {
    if (update_info.size() != ranks_.size()) {
      end_others(-1, "");  // vLLM's rule: a failed update ends the session
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("update_info is a list of {} per-worker payloads, but this receiver "
                              "has {} worker ranks",
                              update_info.size(), ranks_.size()));
    }
    for (auto& one : update_info) {
      per_rank.push_back(one.dump());
      one = nullptr;
    }
  } else {
    per_rank.push_back(update_info.dump());
  }
  update_info = nullptr;
  on_every_rank(
      [&](int k) {
        ranks_[static_cast<std::size_t>(k)]->update_weights_text(
            per_rank[per_rank.size() == 1 ? 0 : static_cast<std::size_t>(k)]);
      },
      true);
}

void ReceiverGroup::finish_weight_update(const std::optional<std::string>& weight_version) {
  std::lock_guard<std::mutex> l(mu_);
  if (ranks_.size() == 1) {
    ranks_[0]->finish_weight_update(weight_version);
    return;
  }
  // Every engine finishes (each ends its session, whatever the others do); the round is
  // committed only if all did.
  std::optional<Error> failed;
  for (int k = 0; k < world_size(); ++k) {
    try {
      ranks_[static_cast<std::size_t>(k)]->finish_engine();
    } catch (const Error& e) {
      if (!failed) failed.emplace(e.code(), who(k) + e.what());
    }
  }
  if (failed) {
    for (Receiver* r : ranks_) r->drop_finished();
    throw *failed;
  }
  for (Receiver* r : ranks_) r->commit_finished(weight_version);
}

void ReceiverGroup::end_weight_update(const std::string& reason) {
  // Not under mu_: it must end an update that holds it. Every rank's engine is aborted before any
  // session is waited for.
  for (Receiver* r : ranks_) r->abort_update();
  for (Receiver* r : ranks_) r->end_weight_update(reason);
}

void ReceiverGroup::load_base(WeightSource& source) {
  std::lock_guard<std::mutex> l(mu_);
  if (ranks_.size() > 1)
    throw Error(WT_ERR_UNSUPPORTED,
                fmt::format("a receiver of {} worker ranks cannot load a base checkpoint: which "
                            "slice each rank holds is known only from the trainer's init",
                            ranks_.size()));
  ranks_[0]->load_base(source);
}

unsigned ReceiverGroup::load_threads() const {
  unsigned n = 0;
  for (const Receiver* r : ranks_) n += r->load_threads();
  return n;
}

void ReceiverGroup::set_weight_version(const std::string& version) {
  // Each rank's version under its own reader lock only: never behind a transfer or an init.
  for (Receiver* r : ranks_) r->set_weight_version(version);
}

bool ReceiverGroup::session_active() const {
  return std::any_of(ranks_.begin(), ranks_.end(),
                     [](const Receiver* r) { return r->session_active(); });
}

std::vector<std::map<std::string, std::string>> ReceiverGroup::checksums_by_rank() const {
  std::vector<std::map<std::string, std::string>> out;
  for (const Receiver* r : ranks_) out.push_back(r->checksums());
  return out;
}

}  // namespace wt
