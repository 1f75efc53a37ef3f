// The witness check (witness.hpp): judged in `wt conformance`, which never loads the plugin.
#include "witness.hpp"

#include "check_context.hpp"

#include "../subprocess.hpp"
#include "../training_step.hpp"

#include <wt/checksum.hpp>
#include <wt/error.hpp>
#include <wt/services/checkpoint_gen.hpp>
#include <wt/services/http_client.hpp>
#include <wt/wt.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <thread>

namespace wt::cli::conformance {

namespace {

using SteadyClock = std::chrono::steady_clock;
using TensorSums = std::map<std::string, std::string>;

constexpr double kWitnessChange = 0.05;  // of every tensor: a tensor not delivered shows
constexpr DLDataType kWitnessDtype{kDLBfloat, 16, 1};

// The checkpoint's tensors after the training step of `seed`: what the worker must then hold.
TensorSums expected_after_step(const std::vector<std::string>& files, uint64_t seed) {
  SafetensorsSource s(files, SafetensorsSource::Memory::private_copy_on_write);
  perturb(s, kWitnessChange, seed);
  TensorSums out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto b = s.bytes(i);
    out[s.metadata()[i].name] = checksum_bytes(b.data(), b.size());
  }
  return out;
}

std::string last_chars(const std::string& output, std::size_t n = 600) {
  return output.size() <= n ? output : "..." + output.substr(output.size() - n);
}

struct WitnessCaps {
  bool trainer = false, worker = false, host = false, sparse = false;
};

// Loads the plugin in a process of its own (the production registry, nothing of the checks'),
// and reads back what it declares. Throws Failed with that process's words when it cannot.
WitnessCaps probe_plugin(const Options& o, SteadyClock::time_point deadline) {
  Child p({o.wt_program, "conformance", o.path, "--witness-probe"});
  // Loading a plugin takes milliseconds: 20 s is for a loaded machine, not for a hung entry point.
  auto left = std::min<std::chrono::milliseconds>(
      std::chrono::seconds(20),
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()));
  if (!p.wait_for("\n", std::max(left, std::chrono::milliseconds(1))))
    fail("a process of wt conformance's own loading the plugin did not answer: {}",
         last_chars(p.output()));
  const int rc = p.wait_exit(std::chrono::seconds(10)).value_or(-1);
  const std::string out = p.output();
  const auto at = out.find("capabilities:");
  if (rc != 0 || at == std::string::npos)
    fail(
        "the plugin does not load in a process of wt conformance's own (whatever the checks "
        "process reported): {}",
        last_chars(out));
  const std::string caps = out.substr(at, out.find('\n', at) - at) + " ";
  auto has = [&](const char* name) { return caps.find(fmt::format(" {} ", name)) != caps.npos; };
  return {has("trainer"), has("worker"), has("host"), has("sparse")};
}

// The arguments of the witness's `wt serve` on the plugin file: the checks' worker options, and
// for a delta backend the base checkpoint it starts from.
std::vector<std::string> worker_args(const Options& o, const WitnessCaps& caps,
                                     const std::string& model) {
  std::vector<std::string> args{"--plugin", o.path};
  if (!o.worker_options.empty()) {
    nlohmann::json cfg = o.worker_options;
    cfg["backend"] = backend_of_plugin_file(o.path);
    args.insert(args.end(), {"--weight-transfer-config", cfg.dump()});
  }
  if (caps.sparse) args.insert(args.end(), {"--load-checkpoint", model});
  return args;
}

// Starts the worker side; its URL is the banner's, which the plugin in that process could print
// first: only this host's loopback is called.
std::pair<std::unique_ptr<Child>, std::string> start_witness_worker(
    const Options& o, const std::vector<std::string>& args) {
  std::unique_ptr<Child> server;
  std::string url;
  try {
    std::tie(server, url) = start_server(o.wt_program, args);
  } catch (const std::exception& e) {
    fail("the worker side (wt serve --plugin {}) did not start: {}", o.path, last_chars(e.what()));
  }
  if (url.rfind("http://127.0.0.1:", 0) != 0)
    fail("the worker side announced {}, not an address on 127.0.0.1", last_chars(url, 80));
  return {std::move(server), std::move(url)};
}

// Reads a child's output while the round runs (a chatty worker must not block on a full pipe),
// until destroyed.
class OutputDrainer {
 public:
  explicit OutputDrainer(Child& child)
      : thread_([this, c = &child] {
          while (!done_.load()) {
            c->drain();
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        }) {}
  ~OutputDrainer() {
    done_ = true;
    thread_.join();
  }
  OutputDrainer(const OutputDrainer&) = delete;
  OutputDrainer& operator=(const OutputDrainer&) = delete;

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// A client of the worker whose every call is bounded by what is left of the check's deadline.
HttpClient client_until(const std::string& url, SteadyClock::time_point deadline) {
  HttpClient::Options h;
  h.timeout = std::max(
      std::chrono::milliseconds(1000),
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()));
  return HttpClient(url, h);
}

std::vector<std::string> trainer_argv(const Options& o, const std::string& url, int world,
                                      uint32_t seed, const std::vector<std::string>& files) {
  std::vector<std::string> argv{o.wt_program,
                                "conformance",
                                o.path,
                                "--witness-for",
                                url,
                                "--witness-world-size",
                                std::to_string(world),
                                "--witness-seed",
                                std::to_string(seed),
                                "--init-info",
                                o.init_info.dump()};
  for (const auto& f : files) argv.insert(argv.end(), {"--checkpoint", f});
  return argv;
}

// Waits for the trainer process's round and fails unless it says it sent it.
void await_trainer_round(Child& trainer, SteadyClock::time_point deadline, int deadline_s) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
  if (!trainer.wait_for("witness round: ", std::max(left, std::chrono::milliseconds(1))))
    fail("the trainer process did not finish its round within {} s: {}", deadline_s,
         last_chars(trainer.output()));
  // It exits once it printed its line (the last "witness round: " is the trainer's own).
  const int rc = trainer.wait_exit(std::chrono::seconds(10)).value_or(-1);
  std::string said = trainer.output().substr(trainer.output().rfind("witness round: "));
  said = said.substr(0, said.find('\n'));
  if (rc != 0 || said.rfind("witness round: sent", 0) != 0)
    fail("the trainer process failed its round (exit status {}): {}", rc, last_chars(said));
}

void check_worker_holds(const TensorSums& want, const TensorSums& have) {
  std::vector<std::string> wrong;
  for (const auto& [name, sum] : want)
    if (auto it = have.find(name); it == have.end() || it->second != sum) wrong.push_back(name);
  if (!wrong.empty())
    fail("the worker holds {} of {} tensors other than the trainer process sent, first '{}'",
         wrong.size(), want.size(), wrong.front());
}

}  // namespace

WitnessResult run_witness(const Options& o, int deadline_s) {
  const auto start = SteadyClock::now();
  const auto deadline = start + std::chrono::seconds(deadline_s);
  try {
    const WitnessCaps caps = probe_plugin(o, deadline);
    if (!caps.trainer || !caps.worker || !caps.host)
      return {Outcome::not_applicable,
              "the plugin (loaded by a process of wt conformance's own) declares no trainer, "
              "worker or host memory: no sync on host memory to witness"};
    // A seed the checks process never saw: its checkpoint is made only now, here.
    std::random_device rd;
    const uint32_t seed = rd();
    const std::string model = o.work_dir + "/witness-model";
    const auto files = write_synthetic_checkpoint(model, model_layout("tiny", kWitnessDtype), seed);
    // What the worker must hold, computed before any process of the plugin's can touch the files.
    const TensorSums want = expected_after_step(files, seed);
    const std::vector<std::string> args = worker_args(o, caps, model);
    std::unique_ptr<Child> server;
    std::string url;
    std::tie(server, url) = start_witness_worker(o, args);
    OutputDrainer drainer(*server);
    const int world = client_until(url, deadline).world_size();
    Child trainer(trainer_argv(o, url, world, seed, files));
    await_trainer_round(trainer, deadline, deadline_s);
    check_worker_holds(want, client_until(url, deadline).weight_checksums());
    return {Outcome::pass,
            fmt::format("{} tensors from a trainer process into a wt serve, both started here on "
                        "the plugin file, match a checkpoint made here, in {:.2f} s",
                        want.size(),
                        std::chrono::duration<double>(SteadyClock::now() - start).count())};
  } catch (const Failed& e) {
    return {Outcome::fail, e.what()};
  } catch (const std::exception& e) {
    return {Outcome::fail, e.what()};
  }
}

int run_witness_trainer(const WitnessTrainer& w) {
  std::shared_ptr<const Plugin> plugin;
  std::string backend;
  try {
    backend = Registry::instance().add_file(w.plugin);
    plugin = Registry::instance().get(backend);
  } catch (const std::exception& e) {
    std::printf("the plugin does not load: %s\n", e.what());
    return 1;
  }
  if (w.probe) {
    const uint64_t c = plugin->capabilities();
    std::printf("capabilities:%s%s%s%s\n", (c & WT_CAP_TRAINER) ? " trainer" : "",
                (c & WT_CAP_WORKER) ? " worker" : "", (c & WT_CAP_HOST_MEMORY) ? " host" : "",
                (c & WT_CAP_SPARSE) ? " sparse" : "");
    return 0;
  }
  try {
    // The init info as the checks fill it (master_address, master_port, world_size, rank where
    // the parser asks for them), through the same code.
    Options o;
    o.path = w.plugin;
    o.init_info = w.init_info;
    Context ctx{
        o,  backend, plugin, nullptr, nullptr, plugin->abi_version(), nlohmann::json::object(),
        {}, nullptr, {}};
    resolve_init_fields(ctx, w.worker_world_size);
    nlohmann::json fields = init_fields_for_trainer(ctx, w.worker_world_size);
    fields["backend"] = backend;
    HttpClient client(w.url);
    SafetensorsSource checkpoint(w.checkpoint, SafetensorsSource::Memory::private_copy_on_write);
    const bool sparse = (plugin->capabilities() & WT_CAP_SPARSE) != 0;
    auto previous = sparse ? snapshot(checkpoint) : std::vector<std::vector<unsigned char>>{};
    perturb(checkpoint, kWitnessChange, w.seed);
    std::vector<Delta> deltas;
    SendOptions options;
    options.weight_version = "conformance-witness";
    if (sparse) {
      deltas = deltas_against(checkpoint, previous);
      for (const auto& d : deltas) options.patches.push_back(d.patch());
    }
    auto engine = trainer_init(InitInfo::from_object(fields, "the witness's init info"), client,
                               sparse ? nullptr : &checkpoint);
    engine->send_weights(options);
    std::printf("witness round: sent %zu tensors\n", checkpoint.size());
    return 0;
  } catch (const std::exception& e) {
    std::printf("witness round: failed: %s\n", e.what());
    return 1;
  }
}

}  // namespace wt::cli::conformance
