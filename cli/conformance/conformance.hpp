// `wt conformance`: the checks a backend author runs on a plugin file before shipping it. Each
// check has a name, a one-line statement of what it verifies and a deadline; they run in a child
// process (run_checks) that reports through a Reporter, so a plugin that crashes or hangs fails
// the check it was in instead of taking the tool with it. The plugin runs in that process and
// could write into its reports, so `wt conformance` reads them as claims: in order, each within
// its deadline, and a pass of the run needs the witness it judges itself (witness.hpp).
#pragma once

#include <wt/wt_plugin.h>

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <string>
#include <vector>

namespace wt::cli::conformance {

// A check applies to plugins that negotiated an ABI version in [min_abi, max_abi] with this host:
// a plugin is judged by the rules of the ABI it speaks (a version-1 plugin is never asked for a
// slot or an out-parameter that only ABI 2 has).
struct CheckDef {
  const char* name;
  const char* verifies;
  int deadline_s;  // the whole check, from its start; nothing the plugin does extends it
  uint32_t min_abi = 1;
  uint32_t max_abi = WT_ABI_VERSION;
  // Run and judged by `wt conformance` itself, after the checks process ended (witness.hpp);
  // the checks process skips it.
  bool judged_outside = false;
};

// Every check, in the order they run.
const std::vector<CheckDef>& checks();

enum class Outcome { pass, fail, skip, not_applicable };

class Reporter {
 public:
  virtual ~Reporter() = default;
  // What the plugin says of itself (backend, version, ABI, capabilities), once it loaded.
  virtual void plugin(const nlohmann::json& info) = 0;
  virtual void begin(const std::string& check) = 0;
  virtual void end(const std::string& check, Outcome outcome, const std::string& detail) = 0;
};

struct Options {
  std::string path;                                          // the plugin file
  nlohmann::json init_info = nlohmann::json::object();       // the fields the loopback needs
  nlohmann::json worker_options = nlohmann::json::object();  // receiver-side backend options
  int rounds = 3;
  std::string wt_program;  // this program, to start `wt serve` for the worker side
  std::string work_dir;    // a fresh directory for the checkpoint and the worker's files
  // Written into every line the checks send to `wt conformance`: a line without it did not come
  // from them (a plugin writing into descriptors it does not own) and fails the check it came in.
  std::string nonce;
};

// The trainer process of the peer-killed check (`wt conformance PLUGIN --trainer-for URL ...`).
// With stop_worker, broken-mid-tensor's trainer: one round of the checkpoint with its bytes
// inverted, which stops that process (its worker's `wt serve`) once the round's first MiB moved.
struct TrainerProcess {
  std::string plugin, url, fields;
  std::vector<std::string> checkpoint;
  pid_t stop_worker = 0;
};
int run_trainer_process(const TrainerProcess& p);

// Runs every check in order (a check whose precondition failed is skipped, saying which).
void run_checks(const Options& options, Reporter& reporter);

}  // namespace wt::cli::conformance
