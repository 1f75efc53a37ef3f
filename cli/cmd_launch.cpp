// `wt launch CONFIG.yaml`: runs a weight sync end to end from a YAML config. The coordinator
// prepares the checkpoint, starts the receiver (an embedded `wt serve`, or a given URL), runs one
// process per trainer rank, draws progress, verifies every round and prints a summary.
#include "cluster_place.hpp"
#include "cluster_trainer_group.hpp"
#include "commands.hpp"
#include "launch_config.hpp"
#include "launch_trainer.hpp"
#include "launcher_env.hpp"
#include "subprocess.hpp"

#include <wt/dtype.hpp>
#include <wt/error.hpp>
#include <wt/registry.hpp>
#include <wt/sdk/shm_segments.hpp>
#include <wt/services/checkpoint_gen.hpp>
#include <wt/services/http_client.hpp>
#include <wt/services/safetensors.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace wt::cli {
namespace {

using namespace std::chrono_literals;

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(WT_ERR_SYSTEM, "cannot find this program's path (/proc/self/exe)");
  return p.string();
}

std::string gb(double bytes) {
  return fmt::format("{:.2f}", bytes / 1e9);
}

std::vector<std::string> prepare_checkpoint(const LaunchConfig& cfg, bool quiet) {
  if (!cfg.generate) return expand_checkpoint_paths(cfg.safetensors);
  const auto& g = *cfg.generate;
  auto dtype = dtype_from_torch_name(g.dtype);
  if (!dtype)
    throw Error(
        WT_ERR_INVALID_ARGUMENT,
        fmt::format("{}: source.generate.dtype '{}' is not a dtype wt knows", cfg.file, g.dtype));
  auto layout = model_layout(g.model, *dtype);
  std::string dir = generated_checkpoint_dir(g);
  if (generated_checkpoint_present(dir, layout, g.seed, g.shards))
    return expand_checkpoint_paths({dir});
  if (!quiet)
    fmt::print(stderr, "generating a synthetic {} checkpoint ({:.0f}M parameters, {} GB) in {}\n",
               g.model, static_cast<double>(layout.total_params()) / 1e6,
               gb(static_cast<double>(layout.total_bytes())), dir);
  try {
    return write_synthetic_checkpoint(dir, layout, g.seed, g.shards);
  } catch (const Error& e) {
    // Another rank on this host (under a cluster launcher) finished the same one first.
    if (generated_checkpoint_present(dir, layout, g.seed, g.shards))
      return expand_checkpoint_paths({dir});
    throw Error(e.code(), fmt::format("{}: source.generate.dir: {}", cfg.file, e.what()));
  }
}

// One round as rank 0 reported it; `round` counts from 1 everywhere wt launch shows it (progress
// lines, the table, the JSON report), as "round 1/4" does.
struct RoundResult {
  int round = 0;
  double seconds = 0;
  uint64_t bytes = 0;
  bool verified = false;
  bool has_verify = false;
  std::size_t checked = 0, mismatched = 0;
  nlohmann::json mismatched_names;
};

void draw_progress(int round, int rounds, uint64_t bytes, uint64_t total, double elapsed) {
  double frac = total ? static_cast<double>(bytes) / static_cast<double>(total) : 1.0;
  int width = 28, filled = static_cast<int>(frac * width);
  double rate = elapsed > 0 ? static_cast<double>(bytes) / elapsed : 0;
  double eta = rate > 0 ? static_cast<double>(total - bytes) / rate : 0;
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(width - filled), '.');
  fmt::print(stderr, "\r  round {}/{} [{}] {:>7} / {} GB  {:>6.2f} GB/s  ETA {:4.1f}s ", round,
             rounds, bar, gb(static_cast<double>(bytes)), gb(static_cast<double>(total)),
             rate / 1e9, eta);
  std::fflush(stderr);
}

// The checkpoint every process reads, checked before any process starts.
struct Checkpoint {
  std::vector<std::string> files;
  uint64_t total = 0;
  std::size_t tensors = 0;
};

// The receivers' layout against the addresses and the backend (the backend's plugin directories
// are registered already).
void check_receivers(const LaunchConfig& cfg) {
  check_rendezvous_reaches_receivers(cfg, cfg.receiver_urls);
  if (cfg.receiver_tensor_parallel_size > 1 &&
      (Registry::instance().get(cfg.backend)->capabilities() & WT_CAP_SPARSE))
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("{}: receiver.tensor_parallel_size > 1 with the delta backend '{}': "
                            "its receivers start from the whole checkpoint, which a rank holding "
                            "a slice cannot load",
                            cfg.file, cfg.backend));
  if (cfg.receiver_tensor_parallel_size > 1 && cfg.receiver_device != "cpu")
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("{}: receiver.tensor_parallel_size > 1 with receiver.device {}: the "
                            "worker ranks of one embedded receiver share its device, and NCCL "
                            "takes one GPU per rank; use tensor_parallel_size 1 per GPU",
                            cfg.file, cfg.receiver_device));
}

// Step 1: the config's init info against the receivers' world sizes (asked of a given URL, an
// embedded wt serve has one worker), then the checkpoint, generated if need be and validated.
Checkpoint check_config(const LaunchConfig& cfg, bool quiet) {
  check_receivers(cfg);
  std::vector<int> world_sizes(cfg.embedded_receiver ? cfg.receiver_count : 0,
                               cfg.receiver_tensor_parallel_size);
  if (!cfg.embedded_receiver && world_size_from_receivers(cfg))
    for (std::size_t k = 0; k < cfg.receiver_urls.size(); ++k) {
      HttpClient::Options hopts;
      hopts.bearer_token = cfg.receiver_token;
      hopts.timeout =
          std::chrono::milliseconds(static_cast<int64_t>(cfg.receiver_timeout_s * 1000));
      try {
        world_sizes.push_back(HttpClient(cfg.receiver_urls[k], hopts).world_size());
      } catch (const Error& e) {
        throw Error(e.code(),
                    fmt::format("receiver {} of {} ({}): {}", k + 1, cfg.receiver_urls.size(),
                                cfg.receiver_urls[k], e.what()));
      }
    }
  try {
    validate_init_info(cfg, world_sizes);
    Checkpoint c;
    c.files = prepare_checkpoint(cfg, quiet);
    SafetensorsSource check(c.files);  // validates every header
    c.total = check.total_bytes();
    c.tensors = check.size();
    return c;
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.rfind(cfg.file, 0) == 0) throw;
    throw Error(e.code(), cfg.file + ": " + msg);
  }
}

// Step 2: the receivers. Embedded ones are `wt serve` children (a delta backend's start from the
// checkpoint, as inference servers do); the URLs of given ones come after theirs.
struct Receivers {
  std::vector<std::unique_ptr<Child>> children;
  std::vector<std::string> urls;
};
Receivers start_receivers(const LaunchConfig& cfg, const std::string& exe,
                          const std::vector<std::string>& files, uint64_t model_bytes) {
  Receivers r;
  r.urls = cfg.receiver_urls;
  const bool sparse = Registry::instance().get(cfg.backend)->capabilities() & WT_CAP_SPARSE;
  if (!cfg.embedded_receiver) return r;
  for (int k = 0; k < cfg.receiver_count; ++k) {
    std::vector<std::string> args{"--backend", cfg.backend, "--device", cfg.receiver_device};
    if (cfg.receiver_tensor_parallel_size > 1)
      args.insert(args.end(),
                  {"--tensor-parallel-size", std::to_string(cfg.receiver_tensor_parallel_size)});
    if (sparse)  // starts from the checkpoint, and so knows the model's size
      for (const auto& f : files) args.insert(args.end(), {"--load-checkpoint", f});
    else  // its first rounds' memory is ready before the first bytes arrive
      args.insert(args.end(), {"--expect-model-bytes", std::to_string(model_bytes)});
    for (const auto& d : cfg.plugin_dirs) args.insert(args.end(), {"--plugin-dir", d});
    // The token travels in the environment: argv is readable by every user of the host.
    // Faulting in the staging memory of two rounds has been seen to run at 0.07 GB/s, and slower
    // beside other work (a VM whose host backs fresh pages lazily): a slow start is not a dead
    // one, so the bound is loose (1 GB: 130 s). A receiver that dies is seen at once (its output
    // ends); this only bounds one that hangs.
    const auto startup = std::chrono::seconds(30) +
                         std::chrono::milliseconds(sparse ? 0 : 100 * model_bytes / 1000000);
    auto [child, url] = start_server(exe, args, {"WT_SERVE_TOKEN=" + cfg.receiver_token}, startup);
    r.children.push_back(std::move(child));
    r.urls.push_back(url);
  }
  return r;
}

// Step 3: one `wt launch CONFIG --trainer-rank K` process per trainer rank.
std::vector<std::unique_ptr<Child>> start_trainer_ranks(const LaunchConfig& cfg,
                                                        const std::string& exe,
                                                        const std::vector<std::string>& urls,
                                                        const std::vector<std::string>& files,
                                                        const std::string& rendezvous) {
  std::vector<std::unique_ptr<Child>> ranks;
  for (int k = 0; k < cfg.trainer_ranks; ++k) {
    std::vector<std::string> argv{exe,
                                  "launch",
                                  cfg.file,
                                  "--trainer-rank",
                                  std::to_string(k),
                                  "--rendezvous-dir",
                                  rendezvous.empty() ? "-" : rendezvous};
    for (const auto& u : urls) argv.insert(argv.end(), {"--receiver-url", u});
    for (const auto& f : files) argv.insert(argv.end(), {"--checkpoint", f});
    ranks.push_back(std::make_unique<Child>(argv));
  }
  return ranks;
}

// What the ranks reported while the run went.
struct RunEvents {
  std::vector<RoundResult> rounds;
  std::vector<std::string> errors;
  nlohmann::json init;
};

// Anything a process prints that is not one of rank 0's JSON events (its log, at WT_LOG_LEVEL)
// goes to stderr. Every pipe is drained as the run goes, so a chatty rank or receiver never
// blocks on a full pipe.
void pass_through(Child& c, const std::string& who) {
  c.drain();
  while (auto line = c.next_line(0ms))
    if (line->empty() || (*line)[0] != '{') fmt::print(stderr, "[{}] {}\n", who, *line);
}

RoundResult round_from_event(const nlohmann::json& ev) {
  RoundResult r;
  r.round = ev["round"].get<int>() + 1;  // the ranks count rounds from 0
  r.seconds = ev["seconds"];
  r.bytes = ev["bytes"];
  r.has_verify = ev.contains("verified");
  if (r.has_verify) {
    r.verified = ev["verified"];
    r.checked = ev["checked"];
    r.mismatched = ev["mismatched_count"];
    r.mismatched_names = ev["mismatched"];
  }
  return r;
}

void print_round_line(const RoundResult& r, int rounds) {
  fmt::print("  round {}/{}: {:.3f} s, {:.2f} GB/s{}\n", r.round, rounds, r.seconds,
             static_cast<double>(r.bytes) / r.seconds / 1e9,
             !r.has_verify ? ""
             : r.verified  ? fmt::format(", verified {}/{} tensors", r.checked, r.checked)
                           : fmt::format(", MISMATCH in {} tensors: {}", r.mismatched,
                                         r.mismatched_names.dump()));
  std::fflush(stdout);
}

// Step 4: follows rank 0's events (progress, rounds, errors) until it ends.
RunEvents follow_ranks(const LaunchConfig& cfg, std::vector<std::unique_ptr<Child>>& ranks,
                       Receivers& receivers, bool json, bool tty) {
  RunEvents out;
  auto round_start = std::chrono::steady_clock::now();
  for (;;) {
    for (std::size_t k = 1; k < ranks.size(); ++k)
      pass_through(*ranks[k], fmt::format("rank {}", k));
    for (std::size_t k = 0; k < receivers.children.size(); ++k)
      pass_through(*receivers.children[k], receivers.children.size() == 1
                                               ? std::string("receiver")
                                               : fmt::format("receiver {}", k + 1));
    auto line = ranks[0]->next_line(100ms);
    if (!line) {
      if (ranks[0]->at_eof()) break;
      continue;
    }
    nlohmann::json ev;
    try {
      ev = nlohmann::json::parse(*line);
    } catch (...) {
      fmt::print(stderr, "[rank 0] {}\n", *line);
      continue;
    }
    const std::string kind = ev.value("event", "");
    if (kind == "init") {
      out.init = ev;
      round_start = std::chrono::steady_clock::now();
    } else if (kind == "progress" && tty) {
      double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - round_start).count();
      draw_progress(ev["round"].get<int>() + 1, cfg.rounds, ev["bytes"], ev["total"], elapsed);
    } else if (kind == "round") {
      out.rounds.push_back(round_from_event(ev));
      if (tty) fmt::print(stderr, "\r\033[K");
      if (!json) print_round_line(out.rounds.back(), cfg.rounds);
      round_start = std::chrono::steady_clock::now();
    } else if (kind == "error") {
      out.errors.push_back(
          fmt::format("rank {}: {}", ev.value("rank", 0), ev.value("message", "")));
    }
  }
  return out;
}

// A rank killed mid-round cannot end the round it was in: the job ends it on every receiver it
// was given, so none waits for calls that will never come (the backends notice their peers'
// closed connections, but not a trainer that died between two control calls).
void end_rounds_of_a_killed_job(const LaunchConfig& cfg, const std::string& why,
                                std::vector<std::string>& errors) {
  HttpClient::Options o;
  o.bearer_token = cfg.receiver_token;
  o.timeout = std::chrono::seconds(5);
  for (const auto& url : cfg.receiver_urls) {
    try {
      HttpClient(url, o).end_weight_update(why);
      fmt::print(stderr, "wt launch: ended the round on receiver {} ({})\n", url, why);
    } catch (const Error& e) {
      errors.push_back(fmt::format("ending the round on receiver {}: {}", url, e.what()));
    }
  }
}

// Step 5: reaps every rank (collecting the errors ranks other than 0 printed), ends the round on
// the given receivers when a rank was killed, then stops the embedded receivers. Returns whether
// every rank exited 0.
bool reap(const LaunchConfig& cfg, std::vector<std::unique_ptr<Child>>& ranks, Receivers& receivers,
          std::vector<std::string>& errors) {
  bool ranks_ok = true;
  std::string killed;                              // the first killed rank, said
  const std::size_t rank0_errors = errors.size();  // rank 0's, from follow_ranks
  for (std::size_t k = 0; k < ranks.size(); ++k) {
    int rc = ranks[k]->wait();
    if (k > 0) pass_through(*ranks[k], fmt::format("rank {}", k));
    if (rc != 0) ranks_ok = false;
    const std::size_t before = k == 0 ? 0 : errors.size();
    if (k > 0) {
      const std::string& out = ranks[k]->output();
      for (std::size_t pos = 0; (pos = out.find("\"event\":\"error\"", pos)) != std::string::npos;
           ++pos) {
        auto start = out.rfind('\n', pos);
        const std::size_t from = start == std::string::npos ? 0 : start + 1;
        auto ev = nlohmann::json::parse(out.substr(from, out.find('\n', pos) - from));
        errors.push_back(fmt::format("rank {}: {}", k, ev.value("message", "")));
      }
    }
    // A rank that died without a word (killed, say) is named: its peers' errors only say that
    // a peer went away.
    const bool said = k == 0 ? rank0_errors > 0 : errors.size() > before;
    const std::string fate = rc > 128 ? fmt::format("trainer rank {} was killed by signal {} ({})",
                                                    k, rc - 128, strsignal(rc - 128))
                                      : fmt::format("trainer rank {} exited with status {}", k, rc);
    if (rc > 128 && killed.empty()) killed = fate;
    if (rc != 0 && !said) errors.push_back(fate);
  }
  if (!killed.empty()) end_rounds_of_a_killed_job(cfg, "wt launch: " + killed, errors);
  for (auto& r : receivers.children) r->kill(SIGTERM);
  for (auto& r : receivers.children) r->wait();
  return ranks_ok;
}

// Step 6: the report.
struct Totals {
  double seconds = 0, fastest = 0;
  uint64_t bytes = 0;
  bool all_verified = true;
};
Totals totals(const LaunchConfig& cfg, const std::vector<RoundResult>& rounds) {
  Totals t;
  for (const auto& r : rounds) {
    t.seconds += r.seconds;
    t.bytes += r.bytes;
    if (r.seconds > 0)
      t.fastest = std::max(t.fastest, static_cast<double>(r.bytes) / r.seconds / 1e9);
    if (cfg.verify && !(r.has_verify && r.verified)) t.all_verified = false;
  }
  return t;
}

void print_json_report(const LaunchConfig& cfg, const Checkpoint& ckpt, const Receivers& receivers,
                       const RunEvents& ev, const Totals& t, bool ok) {
  nlohmann::json rounds = nlohmann::json::array();
  for (const auto& r : ev.rounds)
    rounds.push_back(
        {{"round", r.round},
         {"seconds", r.seconds},
         {"bytes", r.bytes},
         {"gb_per_s", static_cast<double>(r.bytes) / r.seconds / 1e9},
         {"verified", r.has_verify ? nlohmann::json(r.verified) : nlohmann::json(nullptr)},
         {"mismatched", r.mismatched_names}});
  const auto& urls = receivers.urls;
  nlohmann::json report = {
      {"ok", ok},
      {"config", cfg.file},
      {"backend", cfg.backend},
      {"trainer_ranks", cfg.trainer_ranks},
      {"receiver", urls.size() == 1 ? nlohmann::json(urls[0]) : nlohmann::json(urls)},
      {"tensors", ckpt.tensors},
      {"bytes_per_round", ckpt.total},
      {"rounds", rounds},
      {"total_seconds", t.seconds},
      {"mean_gb_per_s", t.seconds > 0 ? static_cast<double>(t.bytes) / t.seconds / 1e9 : 0.0},
      {"fastest_gb_per_s", t.fastest},
      {"errors", ev.errors}};
  if (!ev.init.is_null()) report["trainer_init_seconds"] = ev.init["seconds"];
  fmt::print("{}\n", report.dump(2));
}

void print_table(const LaunchConfig& cfg, const RunEvents& ev, const Totals& t, bool ok) {
  fmt::print("\n  {:<6} {:>9} {:>9} {:>8}  {}\n", "round", "seconds", "GB", "GB/s", "verified");
  for (const auto& r : ev.rounds)
    fmt::print("  {:<6} {:>9.3f} {:>9} {:>8.2f}  {}\n", r.round, r.seconds,
               gb(static_cast<double>(r.bytes)), static_cast<double>(r.bytes) / r.seconds / 1e9,
               !r.has_verify ? "not checked"
               : r.verified  ? "yes"
                             : "NO");
  if (t.seconds > 0)
    fmt::print("  {:<6} {:>9.3f} {:>9} {:>8.2f}\n", "total", t.seconds,
               gb(static_cast<double>(t.bytes)), static_cast<double>(t.bytes) / t.seconds / 1e9);
  if (t.fastest > 0)
    fmt::print(
        "  fastest round: {:.2f} GB/s (the first rounds of a process also pay for first touches "
        "of fresh memory)\n",
        t.fastest);
  for (const auto& e : ev.errors) fmt::print(stderr, "wt launch: error: {}\n", e);
  fmt::print("\n{}\n", ok ? (cfg.verify ? "OK: every round verified"
                                        : "OK: every round completed (not verified)")
                          : "FAILED");
}

// The coordinator: the steps above, in order.
int run_coordinator(const LaunchConfig& cfg, bool json) {
  const bool tty = !json && isatty(2);
  for (const auto& d : cfg.plugin_dirs) Registry::instance().add_directory(d);
  const Checkpoint ckpt = check_config(cfg, json);
  const std::string exe = self_exe();
  Receivers receivers = start_receivers(cfg, exe, ckpt.files, ckpt.total);
  std::string rendezvous;
  // However the run ends, even by an exception: the rendezvous directory goes, and so do the
  // shared-memory segments of ranks killed mid-round (the ranks, declared below, are reaped
  // before this runs), instead of waiting for the next wt process to sweep them.
  struct Cleanup {
    const std::string& dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
      shm::sweep_orphaned_segments();
    }
  } cleanup{rendezvous};
  if (cfg.trainer_ranks > 1) {
    char tmpl[] = "/tmp/wt-launch-XXXXXX";
    if (mkdtemp(tmpl) == nullptr)
      throw Error(WT_ERR_SYSTEM, "cannot create a rendezvous directory in /tmp");
    rendezvous = tmpl;
    write_host_trainer_group(rendezvous);  // rank 0's store port, the group's secret
  }
  if (!json) {
    std::string url_list;
    for (const auto& u : receivers.urls) url_list += (url_list.empty() ? "" : ", ") + u;
    fmt::print(
        "wt launch: backend {} | {} trainer rank(s) | {} tensors, {} GB | receiver{} {}{} | {} "
        "round(s)\n",
        cfg.backend, cfg.trainer_ranks, ckpt.tensors, gb(static_cast<double>(ckpt.total)),
        receivers.urls.size() > 1 ? "s" : "", url_list, cfg.embedded_receiver ? " (embedded)" : "",
        cfg.rounds);
  }
  std::fflush(stdout);
  auto ranks = start_trainer_ranks(cfg, exe, receivers.urls, ckpt.files, rendezvous);
  RunEvents ev = follow_ranks(cfg, ranks, receivers, json, tty);
  const bool ranks_ok = reap(cfg, ranks, receivers, ev.errors);
  const Totals t = totals(cfg, ev.rounds);
  const bool ok = ranks_ok && ev.errors.empty() &&
                  static_cast<int>(ev.rounds.size()) == cfg.rounds && t.all_verified;
  if (json)
    print_json_report(cfg, ckpt, receivers, ev, t, ok);
  else
    print_table(cfg, ev, t, ok);
  return ok ? 0 : 1;
}

// `--rank-from-env`: this process is one trainer rank of a job a cluster launcher started (on
// this host or another); the receivers are running deployments. Rank 0 verifies and reports.
int run_rank_from_env(const LaunchConfig& cfg) {
  if (cfg.embedded_receiver)
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("{}: --rank-from-env runs one trainer rank of a job; its receivers "
                            "must be running deployments: set receiver.urls (docs/cluster.md)",
                            cfg.file));
  for (const auto& d : cfg.plugin_dirs) Registry::instance().add_directory(d);
  const ClusterPlace place =
      resolve_cluster_place(cfg, [](const char* n) { return std::getenv(n); });
  ::unsetenv("WT_TRAINER_SECRET");  // read: no process this one starts inherits it
  const std::string me = fmt::format("rank {}", place.rank);
  for (const auto& line : describe(place)) fmt::print(stderr, "wt launch: {}: {}\n", me, line);
  const Checkpoint ckpt = check_config(cfg, place.local_rank != 0);
  if (place.rank == 0)
    fmt::print(
        "wt launch: backend {} | {} trainer rank(s) | {} tensors, {} GB | receiver{} {} | "
        "{} round(s)\n",
        cfg.backend, place.world_size, ckpt.tensors, gb(static_cast<double>(ckpt.total)),
        cfg.receiver_urls.size() > 1 ? "s" : "", fmt::join(cfg.receiver_urls, ", "), cfg.rounds);
  std::fflush(stdout);
  TrainerRankArgs args;
  args.rank = place.rank;
  args.receiver_urls = cfg.receiver_urls;
  args.checkpoint_files = ckpt.files;
  args.cluster = &place;
  int rounds = 0;  // reported by rank 0
  bool all_verified = true;
  args.on_event = [&](const nlohmann::json& ev) {
    const std::string kind = ev.value("event", "");
    if (kind == "round") {
      const RoundResult r = round_from_event(ev);
      ++rounds;
      if (cfg.verify && !(r.has_verify && r.verified)) all_verified = false;
      if (place.rank == 0) print_round_line(r, cfg.rounds);
    } else if (kind == "init" && place.rank == 0) {
      fmt::print("  trainer_init: {:.3f} s ({} {})\n", ev["seconds"].get<double>(),
                 ev.value("plugin", ""), ev.value("plugin_version", ""));
    } else if (kind == "error") {
      fmt::print(stderr, "wt launch: {}: error: {}\n", me, ev.value("message", ""));
    }
    std::fflush(stdout);
  };
  const int rc = run_trainer_rank(cfg, args);
  // Rank 0 reports the rounds (the others' end in its); it judges them.
  const bool ok = rc == 0 && (place.rank != 0 || (rounds == cfg.rounds && all_verified));
  if (place.rank == 0)
    fmt::print("\n{}\n", !ok          ? "FAILED"
                         : cfg.verify ? "OK: every round verified"
                                      : "OK: every round completed (not verified)");
  else
    fmt::print(stderr, "wt launch: {}: {}\n", me,
               ok ? fmt::format("done, {} round(s)", cfg.rounds) : std::string("FAILED"));
  return ok ? 0 : 1;
}

// `--dry-run`: what a run of this config would start and where, without starting anything. Under a
// cluster launcher, also where this process sits in the job, and whether that agrees with the
// config.
int print_dry_run(const LaunchConfig& cfg) {
  for (const auto& d : cfg.plugin_dirs) Registry::instance().add_directory(d);
  fmt::print("config: {}\n", cfg.file);
  fmt::print("backend: {}\n", cfg.backend);
  for (const char* key : {"master_address", "master_port", "world_size", "device", "packed"})
    if (auto it = cfg.init_info.find(key); it != cfg.init_info.end())
      fmt::print("  init_info.{}: {}\n", key, it->dump());
  if (!cfg.safetensors.empty())
    fmt::print("source: {} safetensors file(s), first {}\n", cfg.safetensors.size(),
               cfg.safetensors.front());
  else if (cfg.generate)
    fmt::print("source: generated {} ({}), seed {}\n", cfg.generate->model, cfg.generate->dtype,
               cfg.generate->seed);
  if (cfg.shard_dim)
    fmt::print(
        "  source.shard: each trainer rank sends only its slice along dim {} (torch.chunk's "
        "split over the {} rank(s))\n",
        *cfg.shard_dim, cfg.trainer_ranks);
  fmt::print("trainer ranks: {}\n", cfg.trainer_ranks);
  if (cfg.embedded_receiver)
    fmt::print(
        "receivers: {} embedded `wt serve` process(es) on 127.0.0.1{}, port chosen at "
        "start\n",
        cfg.receiver_count,
        cfg.receiver_tensor_parallel_size > 1
            ? fmt::format(", each {} tensor-parallel worker ranks",
                          cfg.receiver_tensor_parallel_size)
            : std::string());
  else
    for (const auto& url : cfg.receiver_urls) fmt::print("receiver: {}\n", url);
  fmt::print("rounds: {}{}\n", cfg.rounds, cfg.verify ? ", each verified" : "");
  // Everything resolved is printed first, then every problem found, each on its own line: a dry
  // run is for debugging exactly those.
  std::vector<std::string> problems;
  try {
    check_receivers(cfg);
  } catch (const Error& e) {
    problems.push_back(e.what());
  }
  const Getenv getenv = [](const char* n) { return std::getenv(n); };
  bool launcher = false;
  try {
    launcher = place_from_env(getenv).has_value();
  } catch (const Error&) {
    launcher = true;  // its variables are there but wrong: resolve_cluster_place says how
  }
  if (!launcher)
    fmt::print(
        "launcher: none found in the environment (RANK/WORLD_SIZE, SLURM_PROCID/"
        "SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE): wt launch starts every rank itself\n");
  else  // what `--rank-from-env` would do here, and why it would refuse
    for (const auto& line : describe(resolve_cluster_place(cfg, getenv, problems)))
      fmt::print("{}\n", line);
  if (problems.empty()) return 0;
  fmt::print("\n{} problem(s) a run would stop at:\n", problems.size());
  for (const auto& p : problems) fmt::print("  - {}\n", p);
  return 1;
}

}  // namespace

Run add_launch_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("launch", "Run a weight sync from a YAML config (see docs/config.md)");
  struct Opts {
    std::string config;
    bool json = false, dry_run = false, rank_from_env = false;
    TrainerRankArgs trainer;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("config", o->config, "The YAML launch config")->required();
  cmd->add_flag("--json", o->json, "Print a machine-readable JSON report instead of the table");
  cmd->add_flag("--dry-run", o->dry_run,
                "Print what would run, and where this process sits under a cluster launcher "
                "(torchrun, SLURM, Open MPI), without starting anything");
  cmd->add_flag("--rank-from-env", o->rank_from_env,
                "Run only this process's trainer rank, as a cluster launcher (torchrun, SLURM, "
                "Open MPI, a Ray framework) placed it; the receivers are running deployments "
                "(see docs/cluster.md)");
  // The coordinator runs each trainer rank as `wt launch CONFIG --trainer-rank K ...`.
  auto* rank = cmd->add_option("--trainer-rank", o->trainer.rank)->group("");
  cmd->add_option("--receiver-url", o->trainer.receiver_urls)->group("");
  cmd->add_option("--rendezvous-dir", o->trainer.rendezvous_dir)->group("");
  cmd->add_option("--checkpoint", o->trainer.checkpoint_files)->group("");
  return [o, rank]() {
    LaunchConfig cfg = load_launch_config(o->config);
    if (o->dry_run) return print_dry_run(cfg);
    if (o->rank_from_env) return run_rank_from_env(cfg);
    if (*rank) return run_trainer_rank(cfg, o->trainer);
    return run_coordinator(cfg, o->json);
  };
}

}  // namespace wt::cli
