// The check list and the loop that runs it (in the child process of `wt conformance`).
#include "check_context.hpp"

#include <wt/error.hpp>

#include <functional>

namespace wt::cli::conformance {

const std::vector<CheckDef>& checks() {
  static const std::vector<CheckDef> kChecks{
      {"file", "a regular file named libwt_<backend>.so, safe owner and mode", 10},
      {"exports", "exports wt_plugin_get and nothing else", 10},
      {"load", "loads: ABI version range, tables, backend name, mandatory slots", 10},
      {"negotiation", "answers older, current and newer hosts as the ABI says", 10},
      {"names", "backend matches the file name; plugin_version is a version", 10},
      {"capabilities", "capability bits known, coherent and matching its tables", 10},
      {"init-info", "canonical JSON round trip, buffer sizing, rank", 20},
      {"unknown-keys", "an unknown key is refused with a message", 10},
      {"error-fields", "parse_json names the field of an unknown key or a wrong type", 10, 2},
      {"bad-input", "malformed, mistyped, deeply nested input refused with a message", 20},
      {"destroy-null", "destroy(NULL) is a no-op in every table", 10},
      {"loopback", "rounds from its trainer to its worker in another process, bytes verified", 180},
      {"fan-out", "one trainer feeds two workers (two wt serve) at once, both verified", 120},
      {"streaming-source",
       "streams a source only to WT_CAP_STREAMING_SOURCE, which reads each tensor before the next",
       60},
      {"rejected-update", "a refused round leaves the worker's weights as they were", 120},
      {"abort", "abort() from another thread ends a blocked send_weights promptly", 90},
      {"abort-receive", "a worker aborted while its receive is blocked returns within 5 s", 60},
      {"peer-killed", "a peer SIGKILLed mid-round: the other side fails in time, naming it", 90},
      {"broken-mid-tensor",
       "a round larger than the socket buffers whose trainer dies mid-tensor: the worker fails in "
       "time, keeps its weights, syncs again",
       180},
      {"recovery", "after the failures, a fresh trainer_init syncs again, verified", 120},
      {"leftovers", "no file, descriptor, thread or process left behind by the rounds", 30},
      {"witness",
       "judged outside the checks process: a sync between processes started on the file, bytes "
       "checked against a checkpoint the plugin never saw",
       120, 1, WT_ABI_VERSION, true},
  };
  return kChecks;
}

void end_check_processes(Context& ctx, const std::string& check) {
  std::set<pid_t> keep;
  if (ctx.loopback) keep.insert(loopback_server_pid(*ctx.loopback));
  for (auto& p : kill_descendants(::getpid(), keep)) ctx.strays.emplace_back(check, p);
}

void run_checks(const Options& options, Reporter& reporter) {
  Context ctx{options, {}, {}, nullptr, nullptr, 0, nlohmann::json::object(), {}, nullptr, {}};
  using Fn = std::function<void(Context&, std::string&)>;
  const std::map<std::string, Fn> run{
      {"file", check_file},
      {"exports", check_exports},
      {"load", [&](Context& c, std::string& d) { check_load(c, d, reporter); }},
      {"negotiation", check_negotiation},
      {"names", check_names},
      {"capabilities", check_capabilities},
      {"init-info", check_init_info},
      {"unknown-keys", check_unknown_keys},
      {"error-fields", check_error_fields},
      {"bad-input", check_bad_input},
      {"destroy-null", check_destroy_null},
      {"loopback", check_loopback},
      {"fan-out", check_fan_out},
      {"streaming-source", check_streaming_source},
      {"rejected-update", check_rejected_update},
      {"abort", check_abort},
      {"abort-receive", check_abort_receive},
      {"peer-killed", check_peer_killed},
      {"broken-mid-tensor", check_broken_mid_tensor},
      {"recovery", check_recovery},
      {"leftovers", check_leftovers},
  };
  bool init_ok = false;
  for (const auto& def : checks()) {
    if (def.judged_outside) continue;
    const std::string name = def.name;
    reporter.begin(name);
    std::string detail;
    Outcome outcome = Outcome::pass;
    try {
      const bool after_load = name != "file" && name != "exports" && name != "load";
      if (after_load && !ctx.plugin) throw Skipped("the plugin did not load");
      if (after_load && (ctx.abi < def.min_abi || ctx.abi > def.max_abi)) {
        outcome = Outcome::not_applicable;
        detail =
            def.min_abi == def.max_abi
                ? fmt::format("applies to ABI {}; this plugin speaks ABI {}", def.min_abi, ctx.abi)
                : fmt::format("applies to ABI {} to {}; this plugin speaks ABI {}", def.min_abi,
                              def.max_abi, ctx.abi);
      } else {
        if ((name == "unknown-keys" || name == "error-fields" || name == "bad-input" ||
             name == "loopback") &&
            !init_ok)
          throw Skipped("needs an init info the plugin accepts (see init-info)");
        run.at(name)(ctx, detail);
        if (name == "init-info") init_ok = true;
      }
    } catch (const Skipped& e) {
      outcome = Outcome::skip;
      detail = e.what();
    } catch (const Failed& e) {
      outcome = Outcome::fail;
      detail = e.what();
    } catch (const std::exception& e) {
      outcome = Outcome::fail;
      detail = e.what();
    }
    // Whatever the plugin started during the check ends with it (`leftovers` reports it).
    end_check_processes(ctx, name);
    reporter.end(name, outcome, detail);
  }
}

}  // namespace wt::cli::conformance
