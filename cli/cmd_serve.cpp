// `wt serve`: the reference inference-side receiver (vLLM's weight-transfer HTTP routes).
#include "commands.hpp"
#include "device_option.hpp"

#include <wt/error.hpp>
#include <wt/json_parse.hpp>
#include <wt/registry.hpp>
#include <wt/services/cuda_host_staging.hpp>
#include <wt/services/http_server.hpp>
#include <wt/services/receiver.hpp>
#include <wt/services/receiver_group.hpp>
#include <wt/services/safetensors.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace wt::cli {
namespace {
constexpr int kStopDeadlineSeconds = 10;

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string backend;
  std::string config;
  std::string token;
  std::size_t max_body_mb = 256;
  std::string device = "cpu";
  unsigned load_threads = 0;
  uint64_t expect_model_bytes = 0;
  std::vector<std::string> checkpoint;
  std::vector<std::string> plugin_dirs;
  std::string plugin_file;
  int tensor_parallel_size = 1;
};

void add_serve_options(CLI::App* cmd, ServeOptions& o) {
  cmd->add_option("--host", o.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o.port, "Port (0: any free port, printed at start)")
      ->capture_default_str();
  cmd->add_option("--backend", o.backend, "Backend whose worker engine receives (e.g. ipc)");
  cmd->add_option("--weight-transfer-config", o.config,
                  R"(vLLM's form: '{"backend": "ipc"}', plus the backend's receiver-side options)");
  cmd->add_option("--token", o.token,
                  "Require 'Authorization: Bearer <token>' (or set WT_SERVE_TOKEN)");
  cmd->add_option("--max-body-mb", o.max_body_mb, "Refuse request bodies larger than this")
      ->capture_default_str();
  cmd->add_option("--device", o.device, "Where the worker engine maps weights: cpu or cuda:N")
      ->capture_default_str();
  cmd->add_option("--load-checkpoint", o.checkpoint,
                  "Start from these weights (safetensors files or directories), as an inference "
                  "server starts from its checkpoint: what delta patches apply to");
  cmd->add_option("--load-threads", o.load_threads,
                  "Threads copying received host tensors into place (0: one per core, at most 8)")
      ->capture_default_str();
  cmd->add_option("--expect-model-bytes", o.expect_model_bytes,
                  "The model's size, when known: the first two rounds' staging memory is faulted "
                  "in at start, so they run as fast as later ones (0: the first round faults its "
                  "own)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 50));
  cmd->add_option("--tensor-parallel-size", o.tensor_parallel_size,
                  "Worker ranks standing for one tensor-parallel group: each has its own worker "
                  "engine and keeps only what the trainer sends it (its slice under m2n's plan); "
                  "/get_world_size answers this, /weight_checksums has each rank's")
      ->capture_default_str()
      ->check(CLI::Range(1, ReceiverGroup::kMaxRanks));
  cmd->add_option("--plugin-dir", o.plugin_dirs,
                  "A directory searched for plugins before the default ones (repeatable)");
  cmd->add_option("--plugin", o.plugin_file,
                  "Receive through this plugin file (libwt_<backend>.so) instead of searching; "
                  "--backend defaults to the backend it stands for");
}

// The backend to receive through (from --backend, --plugin and --weight-transfer-config, which
// must agree) and its receiver-side options. Its plugin loads now: one that is missing, unusable
// or has no worker engine is refused at start-up, with the reason, not at the trainer's first
// call.
std::string resolve_backend(const ServeOptions& o, nlohmann::json& backend_options) {
  for (const auto& d : o.plugin_dirs) Registry::instance().add_directory(d);
  std::string backend = o.backend;
  if (!o.plugin_file.empty()) {
    std::string b = Registry::instance().add_file(o.plugin_file);
    if (!backend.empty() && backend != b)
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("--plugin {} is backend '{}', but --backend says '{}'", o.plugin_file,
                              b, backend));
    backend = b;
  }
  backend_options = nlohmann::json::object();
  if (!o.config.empty()) {
    nlohmann::json cfg;
    try {
      cfg = parse_json(o.config);
    } catch (const JsonError& e) {
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("--weight-transfer-config is not valid JSON: {}", e.what()));
    }
    if (!cfg.is_object() || !cfg.contains("backend") || !cfg["backend"].is_string())
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  R"(--weight-transfer-config must look like '{"backend": "ipc"}')");
    if (!backend.empty() && backend != cfg["backend"].get<std::string>())
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("--weight-transfer-config names backend '{}', but {} says '{}'",
                              cfg["backend"].get<std::string>(),
                              o.plugin_file.empty() ? "--backend" : "--plugin", backend));
    backend = cfg["backend"].get<std::string>();
    // Every other key is a receiver-side option of that backend, checked by its worker engine
    // (strictly: an unknown key fails init_weight_transfer_engine, naming it).
    cfg.erase("backend");
    backend_options = std::move(cfg);
  }
  if (backend.empty())
    throw Error(WT_ERR_INVALID_ARGUMENT, "wt serve needs --backend or --weight-transfer-config");
  auto plugin = Registry::instance().get(backend);
  if (!(plugin->capabilities() & WT_CAP_WORKER))
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("backend '{}' ({}) has no worker engine: wt serve cannot receive "
                            "through it",
                            backend, plugin->path()));
  return backend;
}

Receiver::Options receiver_options(const ServeOptions& o, const std::string& backend,
                                   nlohmann::json backend_options) {
  Receiver::Options ropts;
  ropts.backend = backend;
  ropts.device = parse_device(o.device);
  // A CUDA receiver checks the driver and the device now, not at the first update.
  if (ropts.device.device_type == kDLCUDA)
    ropts.device_staging = make_cuda_host_staging(ropts.device.device_id);
  ropts.load_threads = o.load_threads;
  ropts.expect_model_bytes = o.expect_model_bytes;
  ropts.backend_options = std::move(backend_options);
  if (!o.checkpoint.empty() && o.tensor_parallel_size > 1)
    throw Error(WT_ERR_INVALID_ARGUMENT,
                "--load-checkpoint loads whole tensors, but --tensor-parallel-size > 1 ranks each "
                "hold a slice known only from the trainer's init: use one or the other");
  return ropts;
}

// Serves until SIGINT or SIGTERM, which stop the server from this thread (nothing unsafe in a
// handler); a request that never returns does not keep the process past kStopDeadlineSeconds.
int serve_until_signalled(HttpServer& server, const std::string& banner) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  server.start();
  fmt::print("wt serve: listening on {} ({})\n", server.url(), banner);
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  fmt::print("wt serve: stopping ({})\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stdout);
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(kStopDeadlineSeconds));
    fmt::print(stderr, "wt serve: requests still running {} s after the signal; exiting anyway\n",
               kStopDeadlineSeconds);
    std::fflush(stderr);
    _exit(1);
  }).detach();
  server.stop();
  return 0;
}

}  // namespace

Run add_serve_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("serve", "Run the reference receiver: vLLM's weight-transfer HTTP routes");
  auto o = std::make_shared<ServeOptions>();
  add_serve_options(cmd, *o);
  return [o]() {
    nlohmann::json backend_options;
    const std::string backend = resolve_backend(*o, backend_options);
    std::string token = o->token;
    if (token.empty())
      if (const char* env = std::getenv("WT_SERVE_TOKEN")) token = env;
    ReceiverGroup receiver(receiver_options(*o, backend, std::move(backend_options)),
                           o->tensor_parallel_size);
    if (!o->checkpoint.empty()) {
      SafetensorsSource base(o->checkpoint);
      receiver.load_base(base);
      fmt::print("wt serve: loaded {} tensors ({} bytes) from the checkpoint\n", base.size(),
                 base.total_bytes());
    }
    HttpServer::Options sopts;
    sopts.host = o->host;
    sopts.port = o->port;
    sopts.bearer_token = token;
    sopts.max_body_bytes = o->max_body_mb << 20;
    HttpServer server(receiver, sopts);
    return serve_until_signalled(
        server,
        fmt::format("backend {}, device {}, {}{} load thread(s){}", backend, o->device,
                    o->tensor_parallel_size > 1
                        ? fmt::format("{} tensor-parallel worker ranks, ", o->tensor_parallel_size)
                        : std::string(),
                    receiver.load_threads(), token.empty() ? "" : ", bearer token required"));
  };
}

}  // namespace wt::cli
