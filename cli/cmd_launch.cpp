// `wt launch CONFIG.yaml`: runs a weight sync end to end from a YAML config. The coordinator
// prepares the checkpoint, starts the receiver (an embedded `wt serve`, or a given URL), runs one
// process per trainer rank, draws progress, verifies every round and prints a summary.
#include "commands.hpp"
#include "launch_config.hpp"
#include "launch_trainer.hpp"
#include "subprocess.hpp"

#include <wt/checkpoint_gen.hpp>
#include <wt/dtype.hpp>
#include <wt/error.hpp>
#include <wt/http_client.hpp>
#include <wt/registry.hpp>
#include <wt/safetensors.hpp>
#include <wt/sdk/shm_segments.hpp>

#include <fmt/format.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
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
    throw Error(e.code(), fmt::format("{}: source.generate.dir: {}", cfg.file, e.what()));
  }
}

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
  fmt::print(stderr, "\r  round {}/{} [{}] {:>7} / {} GB  {:>6.2f} GB/s  ETA {:4.1f}s ", round + 1,
             rounds, bar, gb(static_cast<double>(bytes)), gb(static_cast<double>(total)),
             rate / 1e9, eta);
  std::fflush(stderr);
}

}  // namespace

Run add_launch_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("launch", "Run a weight sync from a YAML config (see docs/config.md)");
  struct Opts {
    std::string config;
    bool json = false;
    TrainerRankArgs trainer;
    bool is_trainer = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("config", o->config, "The YAML launch config")->required();
  cmd->add_flag("--json", o->json, "Print a machine-readable JSON report instead of the table");
  // The coordinator runs each trainer rank as `wt launch CONFIG --trainer-rank K ...`.
  auto* rank = cmd->add_option("--trainer-rank", o->trainer.rank)->group("");
  cmd->add_option("--receiver-url", o->trainer.receiver_urls)->group("");
  cmd->add_option("--rendezvous-dir", o->trainer.rendezvous_dir)->group("");
  cmd->add_option("--checkpoint", o->trainer.checkpoint_files)->group("");
  return [o, rank]() {
    LaunchConfig cfg = load_launch_config(o->config);
    if (*rank) return run_trainer_rank(cfg, o->trainer);

    const bool tty = !o->json && isatty(2);
    for (const auto& d : cfg.plugin_dirs) Registry::instance().add_directory(d);
    std::vector<std::string> files;
    uint64_t total = 0;
    std::size_t tensors = 0;
    // The receivers' world sizes, for a default world_size: an embedded wt serve has one worker.
    std::vector<int> world_sizes(cfg.embedded_receiver ? cfg.receiver_count : 0, 1);
    if (!cfg.embedded_receiver && cfg.init_info.contains("master_address") &&
        !cfg.init_info.contains("world_size"))
      for (const auto& url : cfg.receiver_urls) {
        HttpClient::Options hopts;
        hopts.bearer_token = cfg.receiver_token;
        hopts.timeout = std::chrono::seconds(30);
        world_sizes.push_back(HttpClient(url, hopts).get("/get_world_size").value("world_size", 1));
      }
    try {
      validate_init_info(cfg, world_sizes);
      files = prepare_checkpoint(cfg, o->json);
      SafetensorsSource check(files);  // validates every header before any process starts
      total = check.total_bytes();
      tensors = check.size();
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.rfind(cfg.file, 0) == 0) throw;
      throw Error(e.code(), cfg.file + ": " + msg);
    }
    const std::string exe = self_exe();

    std::vector<std::unique_ptr<Child>> receivers;
    std::vector<std::string> urls = cfg.receiver_urls;
    // A delta backend's receivers start from the checkpoint, as inference servers do.
    const bool sparse = Registry::instance().get(cfg.backend)->capabilities() & WT_CAP_SPARSE;
    if (cfg.embedded_receiver)
      for (int k = 0; k < cfg.receiver_count; ++k) {
        std::vector<std::string> args{"--backend", cfg.backend, "--device", cfg.receiver_device};
        if (sparse)
          for (const auto& f : files) args.insert(args.end(), {"--load-checkpoint", f});
        for (const auto& d : cfg.plugin_dirs) args.insert(args.end(), {"--plugin-dir", d});
        // The token travels in the environment: argv is readable by every user of the host.
        auto [child, url] = start_server(exe, args, {"WT_SERVE_TOKEN=" + cfg.receiver_token});
        receivers.push_back(std::move(child));
        urls.push_back(url);
      }
    std::string url_list;
    for (const auto& u : urls) url_list += (url_list.empty() ? "" : ", ") + u;
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
    }
    if (!o->json)
      fmt::print(
          "wt launch: backend {} | {} trainer rank(s) | {} tensors, {} GB | receiver{} {}{} | {} "
          "round(s)\n",
          cfg.backend, cfg.trainer_ranks, tensors, gb(static_cast<double>(total)),
          urls.size() > 1 ? "s" : "", url_list, cfg.embedded_receiver ? " (embedded)" : "",
          cfg.rounds);
    std::fflush(stdout);

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

    std::vector<RoundResult> results;
    std::vector<std::string> errors;
    nlohmann::json init_event;
    auto round_start = std::chrono::steady_clock::now();
    // Rank 0 reports events as JSON lines; anything else a process prints (its log, at
    // WT_LOG_LEVEL) is passed through to stderr. Every pipe is drained as the run goes, so a
    // chatty rank or receiver never blocks on a full pipe.
    auto pass_through = [](Child& c, const std::string& who) {
      c.drain();
      while (auto line = c.next_line(0ms))
        if (line->empty() || (*line)[0] != '{') fmt::print(stderr, "[{}] {}\n", who, *line);
    };
    for (;;) {
      for (std::size_t k = 1; k < ranks.size(); ++k)
        pass_through(*ranks[k], fmt::format("rank {}", k));
      for (std::size_t k = 0; k < receivers.size(); ++k)
        pass_through(*receivers[k], receivers.size() == 1 ? std::string("receiver")
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
        init_event = ev;
        round_start = std::chrono::steady_clock::now();
      } else if (kind == "progress" && tty) {
        double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - round_start).count();
        draw_progress(ev["round"], cfg.rounds, ev["bytes"], ev["total"], elapsed);
      } else if (kind == "round") {
        RoundResult r;
        r.round = ev["round"];
        r.seconds = ev["seconds"];
        r.bytes = ev["bytes"];
        r.has_verify = ev.contains("verified");
        if (r.has_verify) {
          r.verified = ev["verified"];
          r.checked = ev["checked"];
          r.mismatched = ev["mismatched_count"];
          r.mismatched_names = ev["mismatched"];
        }
        results.push_back(r);
        if (tty) fmt::print(stderr, "\r\033[K");
        if (!o->json)
          fmt::print("  round {}/{}: {:.3f} s, {:.2f} GB/s{}\n", r.round + 1, cfg.rounds, r.seconds,
                     static_cast<double>(r.bytes) / r.seconds / 1e9,
                     !r.has_verify ? ""
                     : r.verified  ? fmt::format(", verified {}/{} tensors", r.checked, r.checked)
                                   : fmt::format(", MISMATCH in {} tensors: {}", r.mismatched,
                                                 r.mismatched_names.dump()));
        std::fflush(stdout);
        round_start = std::chrono::steady_clock::now();
      } else if (kind == "error") {
        errors.push_back(fmt::format("rank {}: {}", ev.value("rank", 0), ev.value("message", "")));
      }
    }
    bool ranks_ok = true;
    for (std::size_t k = 0; k < ranks.size(); ++k) {
      int rc = ranks[k]->wait();
      if (k > 0) pass_through(*ranks[k], fmt::format("rank {}", k));
      if (rc != 0) ranks_ok = false;
      if (k > 0)
        for (std::size_t pos = 0;
             (pos = ranks[k]->output().find("\"event\":\"error\"", pos)) != std::string::npos;
             ++pos) {
          auto start = ranks[k]->output().rfind('\n', pos);
          auto end = ranks[k]->output().find('\n', pos);
          auto ev = nlohmann::json::parse(
              ranks[k]->output().substr(start == std::string::npos ? 0 : start + 1,
                                        end - (start == std::string::npos ? 0 : start + 1)));
          errors.push_back(fmt::format("rank {}: {}", k, ev.value("message", "")));
        }
      if (rc != 0 && errors.empty())
        errors.push_back(fmt::format("rank {} exited with status {}", k, rc));
    }
    for (auto& r : receivers) r->kill(SIGTERM);
    for (auto& r : receivers) r->wait();

    bool all_verified = true;
    double seconds = 0, fastest = 0;
    uint64_t bytes = 0;
    for (const auto& r : results) {
      seconds += r.seconds;
      bytes += r.bytes;
      if (r.seconds > 0)
        fastest = std::max(fastest, static_cast<double>(r.bytes) / r.seconds / 1e9);
      if (cfg.verify && !(r.has_verify && r.verified)) all_verified = false;
    }
    const bool ok = ranks_ok && errors.empty() && static_cast<int>(results.size()) == cfg.rounds &&
                    all_verified;
    if (o->json) {
      nlohmann::json rounds = nlohmann::json::array();
      for (const auto& r : results)
        rounds.push_back(
            {{"round", r.round},
             {"seconds", r.seconds},
             {"bytes", r.bytes},
             {"gb_per_s", static_cast<double>(r.bytes) / r.seconds / 1e9},
             {"verified", r.has_verify ? nlohmann::json(r.verified) : nlohmann::json(nullptr)},
             {"mismatched", r.mismatched_names}});
      nlohmann::json report = {
          {"ok", ok},
          {"config", cfg.file},
          {"backend", cfg.backend},
          {"trainer_ranks", cfg.trainer_ranks},
          {"receiver", urls.size() == 1 ? nlohmann::json(urls[0]) : nlohmann::json(urls)},
          {"tensors", tensors},
          {"bytes_per_round", total},
          {"rounds", rounds},
          {"total_seconds", seconds},
          {"mean_gb_per_s", seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0},
          {"fastest_gb_per_s", fastest},
          {"errors", errors}};
      if (!init_event.is_null()) report["trainer_init_seconds"] = init_event["seconds"];
      fmt::print("{}\n", report.dump(2));
    } else {
      fmt::print("\n  {:<6} {:>9} {:>9} {:>8}  {}\n", "round", "seconds", "GB", "GB/s", "verified");
      for (const auto& r : results)
        fmt::print("  {:<6} {:>9.3f} {:>9} {:>8.2f}  {}\n", r.round, r.seconds,
                   gb(static_cast<double>(r.bytes)), static_cast<double>(r.bytes) / r.seconds / 1e9,
                   !r.has_verify ? "not checked"
                   : r.verified  ? "yes"
                                 : "NO");
      if (seconds > 0)
        fmt::print("  {:<6} {:>9.3f} {:>9} {:>8.2f}\n", "total", seconds,
                   gb(static_cast<double>(bytes)), static_cast<double>(bytes) / seconds / 1e9);
      if (fastest > 0)
        fmt::print(
            "  fastest round: {:.2f} GB/s (the first rounds of a process also pay for first "
            "touches of "
            "fresh memory)\n",
            fastest);
      for (const auto& e : errors) fmt::print(stderr, "wt launch: error: {}\n", e);
      fmt::print("\n{}\n", ok ? (cfg.verify ? "OK: every round verified"
                                            : "OK: every round completed (not verified)")
                              : "FAILED");
    }
    return ok ? 0 : 1;
  };
}

}  // namespace wt::cli
