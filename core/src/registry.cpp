// Lazy plugin loading: see include/wt/registry.hpp for the rules.
#include <wt/registry.hpp>

#include <wt/error.hpp>
#include <wt/log.hpp>
#include <wt/sdk/host_objects.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/auxv.h>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

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

// Mandatory slots of one vtable, checked by name.
template <typename T, typename M>
void require_slot(const T* table, M T::*slot, const char* name, const std::string& path,
                  std::vector<std::string>& missing) {
  if (!sdk::has_slot(table, slot)) missing.push_back(name);
  (void)path;
}

void validate_api(const wt_plugin_api* api, const std::string& path, const std::string& backend) {
  if (api == nullptr)
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("plugin {} returned WT_OK but no API table", path));
  if (api->struct_size < offsetof(wt_plugin_api, worker) + sizeof(api->worker))
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("plugin {} returned an API table of {} bytes, smaller than ABI {} "
                            "allows ({} bytes)",
                            path, api->struct_size, WT_ABI_MIN_SUPPORTED,
                            offsetof(wt_plugin_api, worker) + sizeof(api->worker)));
  std::string declared = api->backend ? api->backend : "";
  if (declared != backend)
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("plugin {} declares backend '{}', but its file name says '{}'; "
                            "rename the file to libwt_{}.so or fix the plugin",
                            path, declared, backend, declared));
  std::vector<std::string> missing;
  const auto* ii = api->init_info;
  if (ii == nullptr)
    missing.push_back("init_info");
  else {
    require_slot(ii, &wt_init_info_vtable::parse_json, "init_info.parse_json", path, missing);
    require_slot(ii, &wt_init_info_vtable::to_json, "init_info.to_json", path, missing);
    require_slot(ii, &wt_init_info_vtable::rank, "init_info.rank", path, missing);
    require_slot(ii, &wt_init_info_vtable::is_sender, "init_info.is_sender", path, missing);
    require_slot(ii, &wt_init_info_vtable::destroy, "init_info.destroy", path, missing);
  }
  if (api->capabilities & WT_CAP_TRAINER) {
    const auto* t = api->trainer;
    if (t == nullptr)
      missing.push_back("trainer");
    else {
      require_slot(t, &wt_trainer_vtable::create, "trainer.create", path, missing);
      require_slot(t, &wt_trainer_vtable::send_weights, "trainer.send_weights", path, missing);
      require_slot(t, &wt_trainer_vtable::abort, "trainer.abort", path, missing);
      require_slot(t, &wt_trainer_vtable::last_error, "trainer.last_error", path, missing);
      require_slot(t, &wt_trainer_vtable::destroy, "trainer.destroy", path, missing);
    }
  }
  if (api->capabilities & WT_CAP_WORKER) {
    const auto* w = api->worker;
    if (w == nullptr)
      missing.push_back("worker");
    else {
      require_slot(w, &wt_worker_vtable::create, "worker.create", path, missing);
      require_slot(w, &wt_worker_vtable::start, "worker.start", path, missing);
      require_slot(w, &wt_worker_vtable::receive, "worker.receive", path, missing);
      require_slot(w, &wt_worker_vtable::finish, "worker.finish", path, missing);
      require_slot(w, &wt_worker_vtable::abort, "worker.abort", path, missing);
      require_slot(w, &wt_worker_vtable::last_error, "worker.last_error", path, missing);
      require_slot(w, &wt_worker_vtable::destroy, "worker.destroy", path, missing);
    }
  }
  if (!missing.empty())
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("plugin {} is unusable: mandatory slot(s) missing or NULL: {}", path,
                            fmt::join(missing, ", ")));
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

Plugin::Plugin(std::shared_ptr<boost::dll::shared_library> lib, const wt_plugin_api* api,
               std::string path, uint32_t abi_version)
    : lib_(std::move(lib)),
      api_(api),
      path_(std::move(path)),
      backend_(api->backend),
      version_(api->plugin_version ? api->plugin_version : "unknown"),
      abi_version_(abi_version) {
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
  static std::mutex mu;
  static auto* kept = new std::vector<std::shared_ptr<boost::dll::shared_library>>();
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(lib_));
}

std::shared_ptr<const Plugin> load_plugin_file(const std::string& path,
                                               const std::string& backend) {
  namespace dll = boost::dll;
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
  wt_status s = entry(WT_ABI_VERSION, &plugin_abi, &api);
  if (s != WT_OK || plugin_abi < WT_ABI_MIN_SUPPORTED || plugin_abi > WT_ABI_VERSION)
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("plugin {} speaks wt ABI version {}, but this libwt speaks ABI "
                            "versions {} to {}; rebuild the plugin against a matching wt",
                            path, plugin_abi, WT_ABI_MIN_SUPPORTED, WT_ABI_VERSION));
  if (api != nullptr && api->abi_version != plugin_abi)
    throw Error(WT_ERR_INCOMPATIBLE,
                fmt::format("plugin {} negotiated ABI version {} but its table says {}", path,
                            plugin_abi, api->abi_version));
  validate_api(api, path, backend);
  logger()->debug("loaded plugin {} (backend {}, version {}, ABI {})", path, backend,
                  api->plugin_version ? api->plugin_version : "?", plugin_abi);
  return std::make_shared<const Plugin>(std::move(lib), api, path, plugin_abi);
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

std::vector<PluginInfo> Registry::scan() {
  std::vector<PluginInfo> out;
  std::set<std::string> seen;
  for (const auto& dir : search_path()) {
    for (auto& [backend, path] : list_dir(dir)) {
      PluginInfo info;
      info.backend = backend;
      info.path = path;
      info.shadowed = !seen.insert(backend).second;
      try {
        auto p = load_plugin_file(path, backend);
        info.usable = true;
        info.plugin_version = p->version();
        info.abi_version = p->abi_version();
        info.capabilities = p->capabilities();
      } catch (const Error& e) {
        info.problem = e.what();
      }
      out.push_back(std::move(info));
    }
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
