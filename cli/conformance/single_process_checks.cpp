// The checks of a plugin that need no peer: the file, what it exports, how it loads and
// negotiates, its tables, its capability bits and its init-info parser.
#include "check_context.hpp"
#include "elf_exports.hpp"

#include "plugin_table.hpp"  // libwt's current-ABI view of any plugin (wt::private)

#include <wt/error.hpp>
#include <wt/json_parse.hpp>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <regex>

namespace wt::cli::conformance {
namespace {

constexpr std::size_t kErrCap = 4096;
const char* const kUnknownField = "wt_conformance_unknown_field";

std::string status(wt_status s) {
  return status_name(s);
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) ::close(fd);
  if (port == 0) fail("could not find a free TCP port on 127.0.0.1 for master_port");
  return port;
}

// One parse through the host's view of the plugin: the status, the message and the field.
struct Parsed {
  wt_status status = WT_OK;
  std::string message, field;
  wt_init_info* info = nullptr;
};
Parsed parse(const Context& ctx, const std::string& json) {
  Parsed p;
  char err[kErrCap] = {0}, field[256] = {0};
  p.status = ctx.plugin->table().parse_init_info(ctx.plugin->host(), json.c_str(), &p.info, err,
                                                 sizeof err, field, sizeof field);
  p.message = err;
  p.field = field;
  if (p.status != WT_OK) p.info = nullptr;
  return p;
}
std::string with_backend(const Context& ctx, nlohmann::json fields) {
  fields["backend"] = ctx.backend;
  return fields.dump();
}
// A parse that must be refused with WT_ERR_INVALID_ARGUMENT and a message (and, when given, the
// field); `what` says what was passed.
void expect_refusal(const Context& ctx, const std::string& json, const std::string& what,
                    const std::string& field = "") {
  Parsed p = parse(ctx, json);
  if (p.status == WT_OK) {
    ctx.plugin->table().destroy_init_info(p.info);
    fail("parse_json accepted {}; it must refuse it with WT_ERR_INVALID_ARGUMENT", what);
  }
  if (p.status != WT_ERR_INVALID_ARGUMENT)
    fail("parse_json refused {} with {}, not WT_ERR_INVALID_ARGUMENT: {}", what, status(p.status),
         p.message);
  if (p.message.empty()) fail("parse_json refused {} without a message", what);
  if (!field.empty() && p.field != field)
    fail("parse_json refused {} but returned field '{}', not '{}' (message: {})", what, p.field,
         field, p.message);
}

std::string canonical(const Context& ctx, const wt_init_info* info) {
  std::size_t needed = 0;
  wt_status s = ctx.plugin->table().init_info_to_json(info, nullptr, 0, &needed);
  if (s != WT_ERR_BUFFER_TOO_SMALL)
    fail(
        "to_json into a 0-byte buffer returned {}; it must return WT_ERR_BUFFER_TOO_SMALL with "
        "the size needed",
        status(s));
  if (needed < 3 || needed > (64u << 20)) fail("to_json says it needs {} bytes", needed);
  std::string buf(needed, '\0');
  std::size_t again = 0;
  s = ctx.plugin->table().init_info_to_json(info, buf.data(), buf.size(), &again);
  if (s != WT_OK) fail("to_json into a buffer of the size it asked for returned {}", status(s));
  if (std::strlen(buf.c_str()) + 1 != needed)
    fail("to_json asked for {} bytes but wrote a text of {} bytes plus its NUL", needed,
         std::strlen(buf.c_str()));
  return buf.c_str();
}

// A canonical JSON text the plugin wrote, as an object: parsed depth-bounded (it is the plugin's
// text), or the check fails saying what it wrote.
nlohmann::json as_object(const std::string& text) {
  nlohmann::json j;
  try {
    j = parse_json(text);
  } catch (const JsonError& e) {
    fail("to_json wrote {}, which is not JSON: {}", text.substr(0, 200), e.what());
  }
  if (!j.is_object()) fail("to_json wrote {}, not a JSON object", text.substr(0, 200));
  return j;
}

// The init fields once per field of the canonical JSON, that field given a value of another type.
std::vector<std::pair<std::string, nlohmann::json>> mistyped_fields(const Context& ctx) {
  Parsed a = parse(ctx, with_backend(ctx, ctx.init_fields));
  if (a.status != WT_OK) fail("the init info of the init-info check is refused: {}", a.message);
  const std::string text = canonical(ctx, a.info);
  ctx.plugin->table().destroy_init_info(a.info);
  nlohmann::json canon = as_object(text);
  std::vector<std::pair<std::string, nlohmann::json>> out;
  for (auto& [k, v] : canon.items()) {
    if (k == "backend") continue;
    nlohmann::json f = ctx.init_fields;
    f[k] = v.is_object() ? nlohmann::json(12345) : nlohmann::json::object();
    out.emplace_back(k, std::move(f));
  }
  return out;
}

}  // namespace

void resolve_init_fields(Context& ctx, int worker_world_size) {
  nlohmann::json fields = ctx.options.init_info;
  for (int attempt = 0; attempt < 6; ++attempt) {
    Parsed p = parse(ctx, with_backend(ctx, fields));
    if (p.status == WT_OK) {
      ctx.plugin->table().destroy_init_info(p.info);
      ctx.init_fields = fields;
      return;
    }
    const std::string& f = p.field;
    if (fields.contains(f) || f.empty()) break;
    if (f == "master_address")
      fields[f] = "127.0.0.1";
    else if (f == "master_port")
      fields[f] = free_port();
    else if (f == "world_size")
      fields[f] = 1 + worker_world_size;
    else if (f == "rank")
      fields[f] = 0;
    else
      break;
    ctx.filled.push_back(f);
  }
  Parsed p = parse(ctx, with_backend(ctx, fields));
  if (p.status == WT_OK) {
    ctx.plugin->table().destroy_init_info(p.info);
    ctx.init_fields = fields;
    return;
  }
  // A parser that says which field it misses only in its message (not in `field`) is the usual
  // cause when the missing field is one the harness would have filled: say that, not --init-info.
  if (p.field.empty() && ctx.abi >= 2)
    for (const char* k : {"master_address", "master_port", "world_size", "rank"})
      if (p.message.find(k) != std::string::npos && !fields.contains(k))
        fail(
            "the init info {} is refused ({}: {}), and parse_json left its `field` output empty: "
            "the harness fills master_address, master_port, world_size and rank itself, but "
            "only for a parser that writes the name of the field it misses ('{}' here) into "
            "`field` (wt_init_info_vtable.parse_json in wt_plugin.h; with the SDK, fail_field and "
            "FieldReader do it)",
            with_backend(ctx, fields), status(p.status), p.message, k);
  fail(
      "the init info {} is refused ({}: {}); pass the fields the loopback needs with "
      "--init-info",
      with_backend(ctx, fields), status(p.status), p.message);
}

nlohmann::json init_fields_for_trainer(Context& ctx, int worker_world_size) {
  nlohmann::json f = ctx.init_fields;
  for (const auto& k : ctx.filled) {
    if (k == "master_port") f[k] = free_port();
    if (k == "world_size") f[k] = 1 + worker_world_size;
  }
  f["backend"] = ctx.backend;
  return f;
}

void check_file(Context& ctx, std::string& detail) {
  ctx.backend = backend_of_plugin_file(ctx.options.path);
  if (ctx.backend.empty())
    fail("{} is not named libwt_<backend>.so: the host finds a backend by that name",
         ctx.options.path);
  try {
    check_plugin_file(ctx.options.path);
  } catch (const Error& e) {
    fail("{}", e.what());
  }
  struct stat st {};
  ::stat(ctx.options.path.c_str(), &st);
  detail =
      fmt::format("regular file for backend '{}', mode {:04o}", ctx.backend, st.st_mode & 07777);
}

void check_exports(Context& ctx, std::string& detail) {
  std::vector<std::string> syms;
  try {
    syms = exported_symbols(ctx.options.path);
  } catch (const Error& e) {
    fail("{}", e.what());
  }
  bool entry = std::find(syms.begin(), syms.end(), WT_PLUGIN_ENTRY_SYMBOL) != syms.end();
  std::vector<std::string> others;
  for (const auto& s : syms)
    if (s != WT_PLUGIN_ENTRY_SYMBOL) others.push_back(s);
  if (!entry) fail("does not export {}", WT_PLUGIN_ENTRY_SYMBOL);
  if (!others.empty()) {
    std::vector<std::string> shown(others.begin(),
                                   others.begin() + std::min<std::size_t>(others.size(), 5));
    fail(
        "exports {} symbol(s) besides {}: {}{}; build with hidden visibility and "
        "cmake/wt_plugin.map (wt_add_plugin does both)",
        others.size(), WT_PLUGIN_ENTRY_SYMBOL, fmt::join(shown, ", "),
        others.size() > shown.size() ? ", ..." : "");
  }
  detail = "only wt_plugin_get";
}

void check_load(Context& ctx, std::string& detail, Reporter& reporter) {
  if (ctx.backend.empty()) throw Skipped("the file is not named like a plugin");
  // Every check the host makes when it loads a plugin: the ABI version range, the table and
  // vtable pointers, sizes and stamps, the backend name, and every mandatory slot of the declared
  // capabilities pointing at code (docs/plugins.md).
  std::shared_ptr<const Plugin> plugin;
  try {
    Registry::instance().add_file(ctx.options.path);
    plugin = Registry::instance().get(ctx.backend);
  } catch (const Error& e) {
    fail("{}", e.what());
  }
  // The same handle the registry opened (never unloaded): its entry point, for negotiation.
  void* handle = ::dlopen(ctx.options.path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  auto entry = handle != nullptr
                   ? reinterpret_cast<wt_plugin_get_fn>(::dlsym(handle, WT_PLUGIN_ENTRY_SYMBOL))
                   : nullptr;
  if (entry == nullptr) fail("loaded, but {} cannot be found again", WT_PLUGIN_ENTRY_SYMBOL);
  uint32_t v = 0;
  const wt_plugin_api* api = nullptr;
  if (entry(WT_ABI_VERSION, &v, &api) != WT_OK || api == nullptr || v != plugin->abi_version())
    fail("wt_plugin_get answered the registry, but a second identical call answers otherwise");
  ctx.entry = entry;
  ctx.raw = api;
  ctx.abi = v;
  const uint64_t c = plugin->capabilities();
  std::vector<std::string> caps;
  for (auto [bit, name] : {std::pair{WT_CAP_TRAINER, "trainer"},
                           {WT_CAP_WORKER, "worker"},
                           {WT_CAP_HOST_MEMORY, "host"},
                           {WT_CAP_CUDA_MEMORY, "cuda"},
                           {WT_CAP_SPARSE, "sparse"},
                           {WT_CAP_PACKED, "packed"},
                           {WT_CAP_STREAMING_SOURCE, "streaming-source"},
                           {WT_CAP_SHARDED_SOURCE, "sharded-source"}})
    if (c & bit) caps.emplace_back(name);
  reporter.plugin({{"backend", ctx.backend},
                   {"plugin_version", plugin->version()},
                   {"abi_version", ctx.abi},
                   {"capabilities", caps}});
  const int slots = 5 + ((c & WT_CAP_TRAINER) ? 5 : 0) + ((c & WT_CAP_WORKER) ? 7 : 0);
  detail = fmt::format(
      "ABI {} (this host accepts {} to {}{}), table checked, all {} mandatory "
      "slots point at code",
      ctx.abi, WT_ABI_MIN_SUPPORTED, WT_ABI_VERSION,
      ctx.abi < WT_ABI_VERSION ? "; served through the host's adapter" : "", slots);
  ctx.plugin = std::move(plugin);  // last: later checks run only on a fully loaded plugin
}

void check_negotiation(Context& ctx, std::string& detail) {
  // A pointer the plugin must leave alone when it refuses.
  static const wt_plugin_api kUntouched{};
  struct Answer {
    wt_status s;
    uint32_t v;
    const wt_plugin_api* api;
  };
  auto ask = [&](uint32_t host) {
    Answer a{WT_OK, 0, &kUntouched};
    a.s = ctx.entry(host, &a.v, &a.api);
    return a;
  };
  Answer cur = ask(WT_ABI_VERSION), newer = ask(WT_ABI_VERSION + 1), zero = ask(0), one = ask(1);
  if (cur.s != WT_OK || cur.api == &kUntouched || cur.api == nullptr)
    fail("host ABI {}: returned {} without a table", WT_ABI_VERSION, status(cur.s));
  if (newer.s != WT_OK || newer.api == &kUntouched || newer.api == nullptr)
    fail(
        "a newer host (ABI {}) is refused ({}): a plugin must answer a newer host with the "
        "newest version it speaks",
        WT_ABI_VERSION + 1, status(newer.s));
  if (newer.v < cur.v || newer.v > WT_ABI_VERSION + 1)
    fail("a newer host (ABI {}) is answered with version {}, older than the {} it gives this host",
         WT_ABI_VERSION + 1, newer.v, cur.v);
  if (zero.s != WT_ERR_INCOMPATIBLE)
    fail("host ABI 0 (older than any plugin) is answered with {}, not WT_ERR_INCOMPATIBLE",
         status(zero.s));
  if (zero.api != &kUntouched) fail("host ABI 0 is refused, but *api was written anyway");
  if (zero.v < 1) fail("host ABI 0 is refused without writing the plugin's oldest version");
  std::string v1;
  if (one.s == WT_OK) {
    if (one.v != 1 || one.api == &kUntouched || one.api == nullptr || one.api->abi_version != 1)
      fail("host ABI 1 is answered WT_OK but with version {} and a table stamped {}", one.v,
           one.api && one.api != &kUntouched ? one.api->abi_version : 0);
    v1 = "serves a version-1 host too";
  } else if (one.s == WT_ERR_INCOMPATIBLE) {
    if (one.api != &kUntouched) fail("host ABI 1 is refused, but *api was written anyway");
    if (one.v <= 1)
      fail("host ABI 1 is refused, but the version written ({}) is not the newer one it needs",
           one.v);
    v1 = fmt::format("refuses a version-1 host, saying it needs {}", one.v);
  } else {
    fail("host ABI 1 is answered with {}: expected WT_OK (version 1) or WT_ERR_INCOMPATIBLE",
         status(one.s));
  }
  detail = fmt::format("host 0 refused (oldest {}), {}; hosts {} and {} get {} and {}", zero.v, v1,
                       WT_ABI_VERSION, WT_ABI_VERSION + 1, cur.v, newer.v);
}

void check_names(Context& ctx, std::string& detail) {
  if (ctx.raw->plugin_version == nullptr)
    fail("plugin_version is NULL: set it to the plugin's own version, e.g. \"1.2.0\"");
  static const std::regex kVersion(R"(^[0-9]+\.[0-9]+(\.[0-9]+)?([-+][0-9A-Za-z.+-]+)?$)");
  const std::string& v = ctx.plugin->version();
  if (!std::regex_match(v, kVersion))
    fail("plugin_version \"{}\" is not a version such as 1.2.0", v);
  detail = fmt::format("backend '{}' matches the file name, version {}", ctx.backend, v);
}

void check_capabilities(Context& ctx, std::string& detail) {
  const uint64_t c = ctx.plugin->capabilities();
  const uint64_t known = WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY | WT_CAP_CUDA_MEMORY |
                         WT_CAP_SPARSE | WT_CAP_PACKED | WT_CAP_STREAMING_SOURCE |
                         WT_CAP_SHARDED_SOURCE;
  if (c & ~known) fail("declares bits {:#x} that ABI {} does not define", c & ~known, ctx.abi);
  if (!(c & (WT_CAP_TRAINER | WT_CAP_WORKER)))
    fail("declares neither WT_CAP_TRAINER nor WT_CAP_WORKER: nothing can use it");
  if (!(c & (WT_CAP_HOST_MEMORY | WT_CAP_CUDA_MEMORY)))
    fail(
        "declares neither WT_CAP_HOST_MEMORY nor WT_CAP_CUDA_MEMORY: the host hands it no "
        "memory of any kind");
  if (ctx.raw->trainer != nullptr && !(c & WT_CAP_TRAINER))
    fail("has a trainer table but does not declare WT_CAP_TRAINER (the host will not use it)");
  if (ctx.raw->worker != nullptr && !(c & WT_CAP_WORKER))
    fail("has a worker table but does not declare WT_CAP_WORKER (the host will not use it)");
  std::string run = (c & WT_CAP_HOST_MEMORY) ? "host memory is exercised by the loopback"
                                             : "CUDA only: the loopback (host memory) is skipped";
  detail = fmt::format("{:#x}; {}{}", c, run,
                       (c & WT_CAP_SPARSE) ? "; delta backend: rounds send patches" : "");
}

void check_init_info(Context& ctx, std::string& detail) {
  resolve_init_fields(ctx, 1);
  Parsed a = parse(ctx, with_backend(ctx, ctx.init_fields));
  std::string text = canonical(ctx, a.info);
  const int64_t rank = ctx.plugin->table().rank(a.info);
  const bool sender = ctx.plugin->table().is_sender(a.info);
  ctx.plugin->table().destroy_init_info(a.info);
  nlohmann::json j = as_object(text);
  for (auto& [k, v] : ctx.init_fields.items()) {
    if (!j.contains(k)) fail("the canonical JSON {} drops the given field '{}'", text, k);
    (void)v;  // a plugin may normalise a value (a path, a host name); the round trip must hold
  }
  j.erase("backend");
  Parsed b = parse(ctx, with_backend(ctx, j));
  if (b.status != WT_OK)
    fail("its own canonical JSON {} is refused: {} {}", text, status(b.status), b.message);
  std::string again = canonical(ctx, b.info);
  const int64_t rank2 = ctx.plugin->table().rank(b.info);
  ctx.plugin->table().destroy_init_info(b.info);
  nlohmann::json j2 = as_object(again);
  j2.erase("backend");
  if (j2 != j) fail("the round trip changes the canonical JSON: {} became {}", text, again);
  if (rank < 0 || rank2 != rank) fail("rank() says {} and then {}", rank, rank2);
  detail = fmt::format(
      "{} ({} bytes){}; rank {}{}", text, text.size() + 1,
      ctx.filled.empty() ? "" : fmt::format(", filled in: {}", fmt::join(ctx.filled, ", ")), rank,
      sender ? ", sender" : "");
}

void check_unknown_keys(Context& ctx, std::string& detail) {
  nlohmann::json f = ctx.init_fields;
  f[kUnknownField] = 1;
  expect_refusal(ctx, with_backend(ctx, f), fmt::format("an unknown key '{}'", kUnknownField));
  detail = fmt::format("'{}' refused with WT_ERR_INVALID_ARGUMENT and a message", kUnknownField);
}

// ABI 2's parse_json names the field an error is about through its `field` out-parameter; ABI 1
// had none (the host's adapter finds a field in the message text when the plugin wrote one, but
// a version-1 plugin is not judged by it).
void check_error_fields(Context& ctx, std::string& detail) {
  nlohmann::json f = ctx.init_fields;
  f[kUnknownField] = 1;
  expect_refusal(ctx, with_backend(ctx, f), fmt::format("an unknown key '{}'", kUnknownField),
                 kUnknownField);
  int n = 1;
  for (const auto& k : mistyped_fields(ctx)) {
    expect_refusal(ctx, with_backend(ctx, k.second),
                   fmt::format("field '{}' of the wrong type", k.first), k.first);
    ++n;
  }
  detail = fmt::format("the field is returned for the unknown key and {} mistyped field(s)", n - 1);
}

void check_bad_input(Context& ctx, std::string& detail) {
  int n = 0;
  expect_refusal(ctx, "{\"backend\": \"" + ctx.backend + "\", ", "truncated JSON");
  ++n;
  expect_refusal(ctx, "[1, 2]", "a JSON array");
  ++n;
  // A field of the wrong type: every field of the canonical JSON, given as a value of another.
  for (const auto& [k, fields] : mistyped_fields(ctx)) {
    expect_refusal(ctx, with_backend(ctx, fields),
                   fmt::format("field '{}' given as {}", k, fields[k].dump()));
    ++n;
  }
  // Hostile nesting: a parser that recurses per level must not crash on it.
  std::string deep = "{\"backend\": \"" + ctx.backend + "\", \"x\": ";
  deep += std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_refusal(ctx, deep, "a value nested 100,000 deep");
  ++n;
  if (ctx.plugin->capabilities() & WT_CAP_WORKER) {
    wt_worker_create_args args{};
    args.struct_size = sizeof args;
    args.abi_version = WT_ABI_VERSION;
    args.host = ctx.plugin->host();
    args.init_info_json = "{\"truncated\": ";
    args.device = {kDLCPU, 0};
    args.backend_options_json = "{}";
    wt_worker* w = nullptr;
    char err[kErrCap] = {0};
    wt_status s = ctx.plugin->table().create_worker(args, &w, err, sizeof err);
    if (s == WT_OK) {
      ctx.plugin->table().destroy_worker(w);
      fail("worker create accepted a truncated init_info_json");
    }
    if (s != WT_ERR_INVALID_ARGUMENT || err[0] == '\0')
      fail(
          "worker create refused a truncated init_info_json with {} and message \"{}\"; expected "
          "WT_ERR_INVALID_ARGUMENT and a message",
          status(s), err);
    ++n;
  }
  detail = fmt::format("{} bad inputs refused with WT_ERR_INVALID_ARGUMENT and a message", n);
}

void check_destroy_null(Context& ctx, std::string& detail) {
  ctx.raw->init_info->destroy(nullptr);
  int n = 1;
  if (ctx.raw->trainer != nullptr) ctx.raw->trainer->destroy(nullptr), ++n;
  if (ctx.raw->worker != nullptr) ctx.raw->worker->destroy(nullptr), ++n;
  detail = fmt::format("{} destroy slot(s) called with NULL", n);
}

}  // namespace wt::cli::conformance
