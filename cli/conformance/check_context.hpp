// What the conformance checks share while they run in the child process: the options, the loaded
// plugin and the raw table it hands this host, and the init info the loopback uses.
#pragma once

#include "conformance.hpp"
#include "process_tree.hpp"

#include <wt/wt_plugin.h>
#include <wt/registry.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace wt::cli::conformance {

// Thrown by a check: it failed (or was skipped) for the reason given.
struct Failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct Skipped : std::runtime_error {
  using std::runtime_error::runtime_error;
};
template <typename... A>
[[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) {
  throw Failed(fmt::format(f, std::forward<A>(a)...));
}

struct Loopback;
pid_t loopback_server_pid(const Loopback& lb);  // the `wt serve` the loopback runs its worker in

struct Context {
  const Options& options;
  std::string backend;  // the <backend> of libwt_<backend>.so
  std::shared_ptr<const Plugin> plugin;
  wt_plugin_get_fn entry = nullptr;    // the plugin's wt_plugin_get, for negotiation
  const wt_plugin_api* raw = nullptr;  // the table it returned to this host (its own layout)
  uint32_t abi = 0;                    // the version it negotiated with this host
  // The init info the trainer side uses (without "backend"), and the well-known fields the
  // harness filled in because the plugin asked for them (refreshed for every trainer).
  nlohmann::json init_fields = nlohmann::json::object();
  std::vector<std::string> filled;
  std::shared_ptr<Loopback> loopback;  // once started
  // Processes the plugin left behind when a check ended (killed then), for `leftovers`.
  std::vector<std::pair<std::string, ProcessInfo>> strays;
};

// Kills whatever the plugin started during a check (anything below this process but the
// loopback's `wt serve`) and records it in ctx.strays under the check's name.
void end_check_processes(Context& ctx, const std::string& check);

// Fields the harness fills in when the plugin's parser names them as missing: the loopback knows
// their values and the author should not have to (see docs/plugin-authoring.md).
//   master_address 127.0.0.1, master_port a free port, world_size 1 + the worker side's,
//   rank 0.
// Throws Failed with the parser's message when it refuses for any other reason.
void resolve_init_fields(Context& ctx, int worker_world_size);
// The init fields for one more trainer: a fresh port where the harness chose it.
nlohmann::json init_fields_for_trainer(Context& ctx, int worker_world_size);

// The checks of conformance/single_process_checks.cpp (the file, its symbols, its tables and
// parsers) and conformance/loopback_checks.cpp (a trainer here and a worker in `wt serve`).
void check_file(Context& ctx, std::string& detail);
void check_exports(Context& ctx, std::string& detail);
void check_load(Context& ctx, std::string& detail, Reporter& reporter);
void check_negotiation(Context& ctx, std::string& detail);
void check_names(Context& ctx, std::string& detail);
void check_capabilities(Context& ctx, std::string& detail);
void check_init_info(Context& ctx, std::string& detail);
void check_unknown_keys(Context& ctx, std::string& detail);
void check_error_fields(Context& ctx, std::string& detail);
void check_bad_input(Context& ctx, std::string& detail);
void check_destroy_null(Context& ctx, std::string& detail);
void check_loopback(Context& ctx, std::string& detail);
void check_fan_out(Context& ctx, std::string& detail);
void check_rejected_update(Context& ctx, std::string& detail);
void check_abort(Context& ctx, std::string& detail);
void check_abort_receive(Context& ctx, std::string& detail);
void check_peer_killed(Context& ctx, std::string& detail);
void check_broken_mid_tensor(Context& ctx, std::string& detail);
void check_recovery(Context& ctx, std::string& detail);
void check_streaming_source(Context& ctx, std::string& detail);
void check_leftovers(Context& ctx, std::string& detail);

}  // namespace wt::cli::conformance
