// Lazy plugin loading: see include/wt/registry.hpp for the rules.
// This file holds the search path, Registry (get/scan/add_directory/loaded/load_count), Plugin
// with its host logging glue, and loading one plugin file. The checks made on a file before and
// after dlopen are in load_checks.cpp; scan_isolated() and its child processes in
// isolated_scan.cpp.
#include <wt/registry.hpp>

#include "load_checks.hpp"
#include "plugin_table.hpp"

#include <wt/wt_plugin_v1.h>
#include <wt/error.hpp>
#include <wt/log.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/auxv.h>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace wt {
namespace {

constexpr const char* kPrefix = "libwt_";
constexpr const char* kSuffix = ".so";

void host_log(void* user_data, int32_t level, const char* message) {
  auto* l = static_cast<spdlog::logger*>(user_data);
  if (l == nullptr || message == nullptr) return;
  spdlog::level::level_enum lvl = spdlog::level::info;
  switch (level) {
    case WT_LOG_TRACE:
      lvl = spdlog::level::trace;
      break;
    case WT_LOG_DEBUG:
      lvl = spdlog::level::debug;
      break;
    case WT_LOG_INFO:
      lvl = spdlog::level::info;
      break;
    case WT_LOG_WARN:
      lvl = spdlog::level::warn;
      break;
    default:
      lvl = spdlog::level::err;
      break;
  }
  l->log(lvl, "{}", message);
}

int32_t to_wt_level(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
      return WT_LOG_TRACE;
    case spdlog::level::debug:
      return WT_LOG_DEBUG;
    case spdlog::level::info:
      return WT_LOG_INFO;
    case spdlog::level::warn:
      return WT_LOG_WARN;
    case spdlog::level::off:
      return WT_LOG_OFF;
    default:
      return WT_LOG_ERROR;
  }
}

// Boost.DLL puts dlerror() text inside its message; keep just that part.
std::string dl_reason(const std::string& what) {
  const std::string marker = "dlerror system message: ";
  auto pos = what.find(marker);
  if (pos == std::string::npos) return what;
  std::string r = what.substr(pos + marker.size());
  auto close = r.rfind(')');
  return close == std::string::npos ? r : r.substr(0, close);
}

bool env_paths_allowed() {
  return getauxval(AT_SECURE) == 0;
}

std::string default_plugin_dir() {
  // libwt's own directory, found from the address of this function.
  fs::path self = boost::dll::this_line_location();
  return (self.parent_path() / "wt" / "plugins").string();
}

std::string backend_from_filename(const std::string& filename) {
  std::string p = kPrefix, s = kSuffix;
  if (filename.size() <= p.size() + s.size()) return "";
  if (filename.compare(0, p.size(), p) != 0) return "";
  if (filename.compare(filename.size() - s.size(), s.size(), s) != 0) return "";
  return filename.substr(p.size(), filename.size() - p.size() - s.size());
}

// Plugin files in one directory: backend -> path.
std::map<std::string, std::string> list_dir(const std::string& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string b = backend_from_filename(it->path().filename().string());
    if (!b.empty()) out.emplace(b, it->path().string());
  }
  return out;
}

}  // namespace

std::string backend_of_plugin_file(const std::string& path) {
  return backend_from_filename(fs::path(path).filename().string());
}

Plugin::Plugin(std::shared_ptr<boost::dll::shared_library> lib,
               std::unique_ptr<detail::PluginTable> table, std::string path, std::string backend,
               std::string version, uint32_t abi_version, uint64_t capabilities)
    : lib_(std::move(lib)),
      table_(std::move(table)),
      path_(std::move(path)),
      backend_(std::move(backend)),
      version_(std::move(version)),
      abi_version_(abi_version),
      capabilities_(capabilities) {
  auto l = logger("wt." + backend_);
  host_.struct_size = sizeof(wt_host_api);
  host_.abi_version = WT_ABI_VERSION;
  host_.user_data = l.get();  // spdlog's registry keeps the logger alive
  host_.log_level = to_wt_level(l->level());
  host_.log = &host_log;
}

// Never dlclose (see registry.hpp): a library outlives every Plugin made from it, so code and
// static data of an unloaded plugin can never be reached through a stale pointer.
Plugin::~Plugin() {
  table_.reset();
  static std::mutex mu;
  static auto* kept = new std::vector<std::shared_ptr<boost::dll::shared_library>>();
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(lib_));
}

std::shared_ptr<const Plugin> load_plugin_file(const std::string& path,
                                               const std::string& backend) {
  namespace dll = boost::dll;
  check_plugin_file(path);
  std::shared_ptr<dll::shared_library> lib;
  try {
    lib = std::make_shared<dll::shared_library>(
        fs::path(path), dll::load_mode::rtld_now | dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("cannot load plugin {}: {}", path, dl_reason(e.what())));
  }
  if (!lib->has(WT_PLUGIN_ENTRY_SYMBOL))
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("plugin {} does not export the entry symbol '{}'; it is not a wt "
                            "plugin, or was built without WT_PLUGIN_EXPORT",
                            path, WT_PLUGIN_ENTRY_SYMBOL));
  auto entry =
      lib->get<wt_status(uint32_t, uint32_t*, const wt_plugin_api**)>(WT_PLUGIN_ENTRY_SYMBOL);
  uint32_t plugin_abi = 0;
  const wt_plugin_api* api = nullptr;
  // Cannot be made safe in-process: a wt_plugin_get that crashes or never returns takes this
  // process with it (Registry::scan_isolated() survives both).
  wt_status s = entry(WT_ABI_VERSION, &plugin_abi, &api);
  if (s != WT_OK || plugin_abi < WT_ABI_MIN_SUPPORTED || plugin_abi > WT_ABI_VERSION)
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("plugin {} speaks wt ABI version {}, but this libwt speaks ABI "
                            "versions {} to {}; rebuild the plugin against a matching wt",
                            path, plugin_abi, WT_ABI_MIN_SUPPORTED, WT_ABI_VERSION));
  // Version 1 tables have the same layout as version 2 ones (only the slots' arguments differ),
  // so one validation serves both; plugin_table_v1.cpp pins that.
  if (api == nullptr)
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("plugin {} returned WT_OK but no API table", path));
  detail::validate_api(api, plugin_abi, path, backend);
  // From here on the table, its strings and its vtables are known to be readable.
  std::string version = api->plugin_version ? api->plugin_version : "unknown";
  logger()->debug("loaded plugin {} (backend {}, version {}, ABI {})", path, backend, version,
                  plugin_abi);
  auto table = plugin_abi == 1 ? detail::table_v1(reinterpret_cast<const wt_plugin_api_v1*>(api))
                               : detail::table_v2(api);
  return std::make_shared<const Plugin>(std::move(lib), std::move(table), path, backend,
                                        std::move(version), plugin_abi, api->capabilities);
}

PluginInfo probe_plugin_file(const std::string& path, const std::string& backend) {
  PluginInfo info;
  info.backend = backend;
  info.path = path;
  try {
    auto p = load_plugin_file(path, backend);
    info.usable = true;
    info.plugin_version = p->version();
    info.abi_version = p->abi_version();
    info.capabilities = p->capabilities();
  } catch (const Error& e) {
    info.problem = e.what();
  } catch (const std::exception& e) {
    info.problem = fmt::format("plugin {} could not be checked: {}", path, e.what());
  }
  return info;
}

Registry& Registry::instance() {
  static Registry* r = new Registry();  // never destroyed: plugins stay loaded until exit
  return *r;
}

std::vector<std::string> Registry::search_path() const {
  std::vector<std::string> dirs;
  const char* env = std::getenv("WT_PLUGIN_PATH");
  if (env != nullptr && env_paths_allowed()) {
    std::string s = env;
    std::size_t start = 0;
    while (start <= s.size()) {
      std::size_t end = s.find(':', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) dirs.push_back(s.substr(start, end - start));
      start = end + 1;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    dirs.insert(dirs.end(), extra_dirs_.begin(), extra_dirs_.end());
  }
  dirs.push_back(default_plugin_dir());
  return dirs;
}

void Registry::add_directory(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(extra_dirs_.begin(), extra_dirs_.end(), dir) == extra_dirs_.end())
    extra_dirs_.push_back(dir);
}

std::vector<std::string> Registry::added_directories() const {
  std::lock_guard<std::mutex> lock(mu_);
  return extra_dirs_;
}

std::string Registry::add_file(const std::string& path) {
  std::string backend = backend_of_plugin_file(path);
  if (backend.empty())
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("{} is not named like a plugin: expected libwt_<backend>.so", path));
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, plugin] : loaded_)
    if (name == backend && plugin->path() != path)
      throw Error(WT_ERR_STATE, fmt::format("backend '{}' is already loaded from {}, not {}",
                                            backend, plugin->path(), path));
  files_[backend] = path;
  return backend;
}

std::shared_ptr<const Plugin> Registry::get(const std::string& backend) {
  if (backend.empty() || backend.find('/') != std::string::npos)
    throw Error(
        WT_ERR_INVALID_ARGUMENT,
        fmt::format("invalid backend name '{}': expected a plain name such as 'ipc'", backend));
  auto dirs = search_path();
  // One lock for lookup and load: concurrent first calls load a backend exactly once.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, plugin] : loaded_)
    if (name == backend) return plugin;
  if (auto f = files_.find(backend); f != files_.end()) {
    ++load_attempts_[backend];
    auto plugin = load_plugin_file(f->second, backend);
    loaded_.push_back({backend, plugin});
    logger()->info("backend '{}' loaded from {} (given as a file)", backend, f->second);
    return plugin;
  }

  std::set<std::string> found;
  for (const auto& dir : dirs) {
    auto files = list_dir(dir);
    auto it = files.find(backend);
    if (it != files.end()) {
      ++load_attempts_[backend];
      auto plugin = load_plugin_file(it->second, backend);
      loaded_.push_back({backend, plugin});
      logger()->info("backend '{}' loaded from {}", backend, it->second);
      return plugin;
    }
    for (auto& [b, p] : files) found.insert(b);
  }
  throw Error(WT_ERR_NOT_FOUND,
              fmt::format("no plugin for backend '{}': libwt_{}.so is in none of the searched "
                          "directories [{}]; backends found there: [{}]. Set WT_PLUGIN_PATH to "
                          "the directory that holds it",
                          backend, backend, fmt::join(dirs, ", "), fmt::join(found, ", ")));
}

namespace detail {

// Every libwt_*.so on the path, in search order; a backend seen in an earlier directory shadows.
std::vector<Candidate> candidates(const std::vector<std::string>& dirs) {
  std::vector<Candidate> out;
  std::set<std::string> seen;
  for (const auto& dir : dirs)
    for (auto& [backend, path] : list_dir(dir))
      out.push_back({backend, path, !seen.insert(backend).second});
  return out;
}

}  // namespace detail

std::vector<PluginInfo> Registry::scan() {
  std::vector<PluginInfo> out;
  for (const auto& c : detail::candidates(search_path())) {
    PluginInfo info = probe_plugin_file(c.path, c.backend);
    info.shadowed = c.shadowed;
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<std::string> Registry::loaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (auto& [name, e] : loaded_) out.push_back(name);
  return out;
}

int Registry::load_count(const std::string& backend) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = load_attempts_.find(backend);
  return it == load_attempts_.end() ? 0 : it->second;
}

}  // namespace wt
