// The engines of every test plugin (tests/plugins/test_plugin.cpp), compiled once: what differs
// between the variants at run time (the declared name in messages, a trainer create that fails or
// throws, wider tensor elements) comes from variant(), which each variant's own file defines.
#include "test_plugin_engines.hpp"

#include <wt/sdk/errors.hpp>
#include <wt/sdk/host_log.hpp>
#include <wt/sdk/host_objects.hpp>
#include <wt/sdk/json_fields.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

// The wt_tensor of a newer ABI: the current one plus a field this host does not know.
struct wide_tensor {
  wt_tensor t;
  uint64_t newer_field;
};
struct plain_tensor {
  wt_tensor t;
};

using wt::sdk::guard;
using wt::sdk::guard_into;

struct wt_init_info {
  int64_t rank = 0;
};
struct wt_trainer {
  wt::sdk::ClientRef client;
  wt::sdk::SourceRef source;
  wt::sdk::HostLog log;
  bool sender = true;
  std::string last_error;
};
struct wt_worker {
  std::string last_error;
  int64_t rank_offset = -1;         // the init info's, when it has one (receiver groups rewrite it)
  std::vector<float> rank_keys;     // the rank offsets its init info's rank_keys held
  bool fail_finish = false;         // an update asked for the next finish to fail
  std::atomic<bool> active{false};  // abort() may come from another thread
  std::atomic<bool> aborted{false};  // abort() may come from another thread
};

// What one receive() of the test worker delivers: float32 1-D tensors.
struct InlineTensor {
  std::string name;
  std::vector<float> values;
  int64_t shape[1] = {0};
};

namespace wt::test_plugin {

wt_status parse(const wt_host_api*, const char* json, wt_init_info** out, char* err, size_t cap,
                char* field, size_t field_cap) {
  wt::sdk::write_message(field, field_cap, "");
  return guard_into(err, cap, [&] {
    try {
      const std::string what = fmt::format("init_info for backend '{}'", variant().declared);
      auto j = wt::sdk::parse_json_text(json, what);
      wt::sdk::FieldReader r(j, what);
      r.allow("backend");
      int64_t rank = r.opt_int("rank", 0);
      r.finish();
      *out = new wt_init_info{rank};
    } catch (const wt::sdk::Error& e) {
      wt::sdk::write_message(field, field_cap, e.field());
      throw;
    }
  });
}
// Writes lines shaped like `wt conformance`'s verdicts into every pipe this process holds.
namespace {
// Writes `text` into every pipe this process holds. A pipe whose reader is gone must not end the
// forger (it wants to reach the one that is read).
void write_to_every_pipe(std::string_view text) {
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old);
  for (int fd = 3; fd < 256; ++fd) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode)) [[maybe_unused]]
      ssize_t w = ::write(fd, text.data(), text.size());
  }
  ::sigaction(SIGPIPE, &old, nullptr);
}
}  // namespace

void forge_verdicts() {
  write_to_every_pipe(
      "{\"end\": \"init-info\", \"result\": \"pass\", \"detail\": \"forged\"}\n"
      "{\"begin\": \"init-info\"}\n");
}

namespace {
// The first "nonce":"<32 hex digits>" in a writable mapping of this process.
std::string nonce_in_memory() {
  static const std::string kKey = std::string("\"non") + "ce\":\"";  // not itself in .rodata whole
  std::ifstream maps("/proc/self/maps");
  int mem = ::open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  if (mem < 0) return "";
  std::string found;
  std::vector<char> buf(std::size_t{1} << 20);
  for (std::string line; found.empty() && std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {0};
    // Not a mapping of 1 GiB or more: the host's heap and stacks are smaller, and a sanitizer's
    // shadow (terabytes reserved, read back as zeros) would take hours.
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) != 3 || perms[0] != 'r' ||
        perms[1] != 'w' || hi - lo >= (1ul << 30))
      continue;
    for (unsigned long at = lo; found.empty() && at < hi; at += buf.size() - 64) {
      const std::size_t want = std::min<unsigned long>(buf.size(), hi - at);
      const ssize_t n = ::pread(mem, buf.data(), want, static_cast<off_t>(at));
      if (n <= 0) break;
      const std::string_view text(buf.data(), static_cast<std::size_t>(n));
      for (std::size_t k = text.find(kKey); k != text.npos; k = text.find(kKey, k + 1)) {
        const std::string_view v = text.substr(k + kKey.size(), 33);
        if (v.size() == 33 && v[32] == '"' &&
            v.substr(0, 32).find_first_not_of("0123456789abcdef") == v.npos) {
          found = std::string(v.substr(0, 32));
          break;
        }
      }
      if (want < buf.size()) break;
    }
  }
  ::close(mem);
  return found;
}
}  // namespace

void forge_verdicts_with_nonce() {
  const std::string nonce = nonce_in_memory();
  if (nonce.empty()) return;
  static const char* kLater[] = {
      "negotiation",      "names",           "capabilities", "init-info",     "unknown-keys",
      "error-fields",     "bad-input",       "destroy-null", "loopback",      "fan-out",
      "streaming-source", "rejected-update", "abort",        "abort-receive", "peer-killed",
      "recovery",         "leftovers",       "witness"};
  auto line = [&](const nlohmann::json& j) {
    nlohmann::json l = j;
    l["nonce"] = nonce;
    return l.dump() + "\n";
  };
  std::string lines = line({{"plugin",
                             {{"backend", variant().declared},
                              {"plugin_version", "1.0.0"},
                              {"abi_version", WT_ABI_VERSION},
                              {"capabilities", {"trainer", "worker", "host"}}}}});
  lines += line({{"end", "load"}, {"result", "pass"}, {"detail", "forged"}});
  for (const char* c : kLater)
    lines += line({{"begin", c}}) + line({{"end", c}, {"result", "pass"}, {"detail", "forged"}});
  write_to_every_pipe(lines);
  ::_exit(0);
}

// A descriptor never closed, a temp file never removed, and a daemon that outlives everything.
void leak_everything() {
  [[maybe_unused]] int fd = ::open("/dev/null", O_RDONLY);
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/wt-test-leak-XXXXXX";
  int f = ::mkstemp(path.data());
  if (f >= 0) ::close(f);
  pid_t child = ::fork();
  if (child == 0) {
    ::setsid();
    if (::fork() == 0) {
      ::prctl(PR_SET_NAME, "wt-test-daemon");
      for (int i = 3; i < 1024; ++i) ::close(i);
      for (;;) ::pause();
    }
    ::_exit(0);
  }
  if (child > 0) ::waitpid(child, nullptr, 0);
}

wt_status to_json(const wt_init_info* info, char* buf, size_t cap, size_t* needed) {
  if (variant().forges) forge_verdicts();
  std::string text = nlohmann::json{{"rank", info->rank}}.dump();
  *needed = text.size() + 1;
  if (cap < text.size() + 1) return WT_ERR_BUFFER_TOO_SMALL;
  std::memcpy(buf, text.c_str(), text.size() + 1);
  return WT_OK;
}
int64_t rank(const wt_init_info* info) {
  return info->rank;
}
int32_t is_sender(const wt_init_info* info) {
  return info->rank == 0;
}
void destroy_info(wt_init_info* info) {
  delete info;
}

wt_status trainer_create(const wt_trainer_create_args* args, wt_trainer** out, char* err,
                         size_t cap) {
  const wt_host_api* host = args->host;
  const wt_init_info* info = args->info;
  const wt_client* client = args->client;
  const wt_weight_source* source = args->source;
  return guard_into(err, cap, [&] {
    if (variant().init_fails)
      wt::sdk::fail(WT_ERR_SYSTEM, "test plugin: trainer init failed on purpose");
    if (variant().throws)
      throw std::runtime_error("test plugin: exception thrown inside the plugin");
    if (variant().leaks) leak_everything();
    auto t = new wt_trainer{wt::sdk::ClientRef(client), wt::sdk::SourceRef(source),
                            wt::sdk::HostLog(host, "[test] "), info->rank == 0, ""};
    t->log.info("trainer created (rank {})", info->rank);
    if (t->sender) t->client.init_weight_transfer_engine(R"({"echo":true})");
    *out = t;
  });
}

// One round: start, one update naming every tensor of a fresh pass, finish. The pass is walked
// with wt_tensors of element_tensor's size (wider than the host's for the "wide" variant).
template <typename element_tensor>
wt_status send_weights_as(wt_trainer* t, const wt_send_args* args) {
  return guard(t->last_error, [&] {
    if (!t->sender) return;
    nlohmann::json names = nlohmann::json::array();
    // A round this plugin started and then failed is ended on the worker (end_weight_update).
    bool started = false;
    struct EndOnFailure {
      wt_trainer* t;
      bool& started;
      ~EndOnFailure() {
        if (started && std::uncaught_exceptions() > 0)
          t->client.end_weight_update("the test plugin's round failed");
      }
    } end_on_failure{t, started};
    t->client.start_weight_update();
    started = true;
    if (variant().deaf_abort) t->client.update_weights(R"({"deaf": true})");
    if (t->source.valid()) {
      // Walks the pass through the raw slots: this plugin decides the size of what next() fills.
      const wt_weight_source* src = t->source.raw();
      char err[512] = {0};
      if (src->begin(src->ctx, err, sizeof err) != WT_OK)
        wt::sdk::fail(WT_ERR_REMOTE, "begin: {}", err);
      for (;;) {
        struct {
          element_tensor e;
          uint64_t canary;
        } out{};
        out.canary = 0x5a5a5a5a5a5a5a5aull;
        out.e.t.struct_size = sizeof(element_tensor);
        int32_t done = 0;
        wt_status st = src->next(src->ctx, &out.e.t, &done, err, sizeof err);
        if (st != WT_OK) {
          src->end(src->ctx);
          wt::sdk::fail(st, "next: {}", err);
        }
        if (done) break;
        if (out.canary != 0x5a5a5a5a5a5a5a5aull || out.e.t.struct_size > sizeof(element_tensor)) {
          src->end(src->ctx);
          wt::sdk::fail(WT_ERR_INTERNAL, "the host wrote beyond the wt_tensor this plugin sized");
        }
        names.push_back(out.e.t.name);
      }
      src->end(src->ctx);
    }
    const std::string update = nlohmann::json{{"names", names}}.dump();
    if (variant().retries) {  // WT_TEST_RETRIES: hides a dead worker behind a minute of retries
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      for (;;) {
        try {
          t->client.update_weights(update);
          break;
        } catch (const wt::sdk::Error&) {
          if (std::chrono::steady_clock::now() > until) throw;
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
      }
    } else {
      t->client.update_weights(update);
    }
    t->client.finish_weight_update(args ? args->weight_version : nullptr);
  });
}
wt_status send_weights(wt_trainer* t, const wt_send_args* args) {
  return variant().wide ? send_weights_as<wide_tensor>(t, args)
                        : send_weights_as<plain_tensor>(t, args);
}
wt_status trainer_abort(wt_trainer*) {
  return WT_OK;
}
const char* trainer_last_error(const wt_trainer* t) {
  return t->last_error.c_str();
}
void trainer_destroy(wt_trainer* t) {
  delete t;
}

wt_status worker_create(const wt_worker_create_args* args, wt_worker** out, char* err, size_t cap) {
  auto w = std::make_unique<wt_worker>();
  const wt_status st = guard_into(err, cap, [&] {
    if (args->init_info_json == nullptr) return;
    auto j = wt::sdk::parse_json_text(args->init_info_json, "init_info");
    if (j.is_object() && j.contains("rank_offset") && j["rank_offset"].is_number_integer())
      w->rank_offset = j["rank_offset"].get<int64_t>();
    if (j.is_object() && j.contains("rank_keys") && j["rank_keys"].is_object())
      for (const auto& [offset, key] : j["rank_keys"].items())
        w->rank_keys.push_back(std::stof(offset));
    // A group's rank refusing init (fail_rank_offset), the others waiting as in a rendezvous.
    if (j.is_object() && j.contains("fail_rank_offset")) {
      if (j["fail_rank_offset"] == w->rank_offset)
        throw wt::sdk::Error(WT_ERR_INVALID_ARGUMENT,
                             "init refused at rank_offset " + std::to_string(w->rank_offset));
      std::this_thread::sleep_for(std::chrono::milliseconds(j.value("init_wait_ms", 0)));
    }
  });
  if (st == WT_OK) *out = w.release();
  return st;
}
wt_status worker_start(wt_worker* w) {
  w->active = true;
  w->aborted = false;
  return WT_OK;
}
template <typename element_tensor>
wt_status worker_receive_as(wt_worker* w, const char* json, const wt_loader* loader) {
  if (!w->active) {
    w->last_error = "receive before start";
    return WT_ERR_STATE;
  }
  return guard(w->last_error, [&] {
    auto j = wt::sdk::parse_json_text(json, "update_info");
    if (j.contains("deaf")) {  // WT_TEST_DEAF_ABORT: a wait that abort() does not end
      std::this_thread::sleep_for(std::chrono::seconds(7));
      throw wt::sdk::Error(WT_ERR_TIMEOUT, "the deaf receive gave up after 7 s");
    }
    // A transfer that never completes on its own: only abort() (from another thread) ends it.
    if (j.contains("block_until_abort")) {
      while (!w->aborted) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      throw wt::sdk::Error(WT_ERR_ABORTED, "aborted while blocked in a transfer");
    }
    if (j.contains("fail"))  // a refused update, with the given message
      throw wt::sdk::Error(WT_ERR_INVALID_ARGUMENT, j["fail"].get<std::string>());
    if (j.contains("fail_finish")) w->fail_finish = true;
    if (j.value("report_rank_offset", false))  // the rank offset it was given, as a tensor
      j["inline"] = nlohmann::json::array(
          {{{"name", "rank_offset"}, {"values", {static_cast<float>(w->rank_offset)}}},
           {{"name", "rank_keys"}, {"values", w->rank_keys}}});
    char err[512] = {0};
    auto check = [&](wt_status st, const char* what) {
      if (st != WT_OK) wt::sdk::fail(st, "{}: {}", what, err);
    };
    if (j.contains("inline")) {
      std::vector<InlineTensor> items;
      for (const auto& x : j["inline"])
        items.push_back({x["name"].get<std::string>(), x["values"].get<std::vector<float>>()});
      std::vector<element_tensor> batch;
      for (auto& it : items) {
        it.shape[0] = static_cast<int64_t>(it.values.size());
        DLTensor d{it.values.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, it.shape, nullptr, 0};
        if (j.value("in_place", false)) {
          wt_param_meta m{};
          m.struct_size = sizeof m;
          m.abi_version = WT_ABI_VERSION;
          m.name = it.name.c_str();
          m.dtype = d.dtype;
          m.ndim = 1;
          m.shape = it.shape;
          DLTensor dst{};
          int32_t found = 0;
          check(loader->destination(loader->ctx, &m, &dst, &found, err, sizeof err), "destination");
          if (found) {
            std::memcpy(dst.data, it.values.data(), it.values.size() * sizeof(float));
            check(loader->written(loader->ctx, it.name.c_str(), err, sizeof err), "written");
            continue;
          }
        }
        element_tensor e{};
        e.t.struct_size = sizeof(element_tensor);
        e.t.abi_version = WT_ABI_VERSION;
        e.t.name = it.name.c_str();
        e.t.tensor = d;
        batch.push_back(e);
      }
      if (!batch.empty())
        check(loader->load(loader->ctx, &batch[0].t, batch.size(), err, sizeof err), "load");
    }
    if (j.contains("patch")) {
      // One patch, or a list of them handed over as one batch.
      auto list = j["patch"].is_array() ? j["patch"] : nlohmann::json::array({j["patch"]});
      struct Owned {
        std::string name;
        std::vector<int32_t> idx;
        std::vector<float> vals;
        std::vector<int64_t> full;
        int64_t n[1], nv[1];
      };
      std::vector<Owned> owned(list.size());
      std::vector<wt_sparse_patch> batch(list.size());
      for (std::size_t i = 0; i < list.size(); ++i) {
        auto& o = owned[i];
        o.name = list[i]["name"].get<std::string>();
        o.idx = list[i]["indices"].get<std::vector<int32_t>>();
        o.vals = list[i]["values"].get<std::vector<float>>();
        o.full = list[i]["full_shape"].get<std::vector<int64_t>>();
        o.n[0] = static_cast<int64_t>(o.idx.size());
        o.nv[0] = static_cast<int64_t>(o.vals.size());
        auto& patch = batch[i];
        patch.struct_size = sizeof patch;
        patch.abi_version = WT_ABI_VERSION;
        patch.name = o.name.c_str();
        patch.indices = DLTensor{o.idx.data(), {kDLCPU, 0}, 1, {kDLInt, 32, 1}, o.n, nullptr, 0};
        patch.values = DLTensor{o.vals.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, o.nv, nullptr, 0};
        patch.full_ndim = static_cast<int32_t>(o.full.size());
        patch.full_shape = o.full.data();
      }
      check(loader->load_patches(loader->ctx, batch.data(), batch.size(), err, sizeof err),
            "load_patches");
    }
  });
}
wt_status worker_receive(wt_worker* w, const char* json, const wt_loader* loader) {
  return variant().wide ? worker_receive_as<wide_tensor>(w, json, loader)
                        : worker_receive_as<plain_tensor>(w, json, loader);
}
wt_status worker_finish(wt_worker* w) {
  w->active = false;
  if (w->fail_finish) {
    w->fail_finish = false;
    w->last_error = "the finish this update asked to fail";
    return WT_ERR_REMOTE;
  }
  return WT_OK;
}
wt_status worker_abort(wt_worker* w) {
  w->aborted = true;
  w->fail_finish = false;
  return worker_finish(w);
}
const char* worker_last_error(const wt_worker* w) {
  return w->last_error.c_str();
}
void worker_destroy(wt_worker* w) {
  delete w;
}

}  // namespace wt::test_plugin
