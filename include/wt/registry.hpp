// The plugin registry: finds libwt_<backend>.so on the search path and loads it lazily, once,
// the first time an engine of that backend is made.
//
// Search order: each directory of WT_PLUGIN_PATH (colon-separated; ignored in setuid/setgid
// programs), then directories added with add_directory() (e.g. from a config file), then the
// plugin directory installed next to libwt (<libdir>/wt/plugins). The first match wins.
// Plugins are opened with RTLD_NOW | RTLD_LOCAL and are never unloaded: every engine holds a
// reference to its plugin and the registry keeps its own until exit.
//
// Every load (get(), scan(), load_plugin_file()) is checked before and after dlopen:
//   before: the file must be a regular file (stat only: a FIFO is never opened), and neither it
//           nor its directory may be writable by others or by a group other than the process's
//           own, or owned by a user other than root or this process's effective user;
//   after:  the API table and every vtable wt_plugin_get hands back must lie in readable memory
//           (probed without faulting), be aligned, have plausible size and version fields, and
//           every slot must point into executable memory; the backend and version strings must be
//           NUL-terminated within a bound and made of allowed characters.
// What cannot be checked in-process (a wt_plugin_get or a static constructor that crashes or never
// returns) is survived only by scan_isolated(), which probes each file in a child process.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/wt_plugin.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace boost::dll {
class shared_library;
}

namespace wt {

namespace detail {
class PluginTable;
}

// A loaded, validated plugin.
class Plugin {
 public:
  Plugin(std::shared_ptr<boost::dll::shared_library> lib,
         std::unique_ptr<detail::PluginTable> table, std::string path, std::string backend,
         std::string version, uint32_t abi_version, uint64_t capabilities);
  ~Plugin();
  // The plugin's table in the current ABI, whatever version the plugin speaks (libwt internal).
  const detail::PluginTable& table() const { return *table_; }
  const std::string& backend() const { return backend_; }
  const std::string& path() const { return path_; }
  const std::string& version() const { return version_; }
  // The ABI version the plugin negotiated (1 is served through the host's adapter).
  uint32_t abi_version() const { return abi_version_; }
  uint64_t capabilities() const { return capabilities_; }
  // The services handed to this plugin's objects (logging to "wt.<backend>").
  const wt_host_api* host() const { return &host_; }

 private:
  std::shared_ptr<boost::dll::shared_library> lib_;
  std::unique_ptr<detail::PluginTable> table_;
  std::string path_, backend_, version_;
  uint32_t abi_version_;
  uint64_t capabilities_;
  wt_host_api host_{};
};

// What `wt plugins` shows for one file on the search path.
struct PluginInfo {
  std::string backend;  // from the file name
  std::string path;
  bool usable = false;
  std::string problem;  // why not usable
  std::string plugin_version;
  uint32_t abi_version = 0;
  uint64_t capabilities = 0;
  bool shadowed = false;  // an earlier directory has the same backend
};

class Registry {
 public:
  static Registry& instance();

  // The directories searched, in order.
  std::vector<std::string> search_path() const;
  // Adds a directory after WT_PLUGIN_PATH and before the default one (after those added
  // before; adding one twice keeps the first place).
  void add_directory(const std::string& dir);
  // The directories added with add_directory(), in order (e.g. to hand a config's plugin_dirs on
  // to a child process such as an embedded `wt serve --plugin-dir`).
  std::vector<std::string> added_directories() const;
  // Makes `path` (named libwt_<backend>.so) the plugin of its backend in this process, ahead of
  // every directory: for a tool checking one file (`wt conformance`, `wt serve --plugin`).
  // Nothing is opened yet; the usual checks run at first use. Returns the backend. Throws
  // wt::Error (WT_ERR_INVALID_ARGUMENT) for a file not named like a plugin, and
  // (WT_ERR_STATE) when the backend is already loaded from another file.
  std::string add_file(const std::string& path);

  // Loads the backend's plugin on first use; throws wt::Error (WT_ERR_NOT_FOUND,
  // WT_ERR_INCOMPATIBLE, WT_ERR_SYSTEM) with a message naming the file or the directories.
  std::shared_ptr<const Plugin> get(const std::string& backend);

  // Every libwt_*.so on the search path, loaded and checked in this process, no engine created.
  // A plugin whose wt_plugin_get (or static constructor) crashes or hangs takes this process
  // with it: use scan_isolated() for files you do not trust.
  std::vector<PluginInfo> scan();

  // Like scan(), but each file is loaded and checked in a forked child process (all at once),
  // which is killed when it has not answered within `deadline`. A crash, a hang or an early exit
  // is reported as the file's problem ("... crashed with SIGSEGV while loading", "... did not
  // answer within 5 s ..."); nothing is loaded into this process. Call it from a process that has
  // no other threads (the child runs dlopen after fork), e.g. `wt plugins`.
  std::vector<PluginInfo> scan_isolated(
      std::chrono::milliseconds deadline = std::chrono::milliseconds(5000));

  // Backends loaded so far, and how many times get() opened its file (0 or 1: concurrent first
  // calls share one load).
  std::vector<std::string> loaded() const;
  int load_count(const std::string& backend) const;

 private:
  Registry() = default;
  mutable std::mutex mu_;
  std::vector<std::string> extra_dirs_;
  std::map<std::string, std::string> files_;  // backend -> file, from add_file()
  std::vector<std::pair<std::string, std::shared_ptr<const Plugin>>> loaded_;
  std::map<std::string, int> load_attempts_;
};

// The backend a plugin file stands for: "x" for ".../libwt_x.so", "" for any other name.
std::string backend_of_plugin_file(const std::string& path);

// Opens and validates one plugin file; throws wt::Error. `backend` is the name the file stands
// for (libwt_<backend>.so). Exposed for tests and tools.
std::shared_ptr<const Plugin> load_plugin_file(const std::string& path, const std::string& backend);

// The checks made before dlopen (file type, ownership and permissions of the file and of its
// directory); throws wt::Error naming the path and the reason. Opens nothing.
void check_plugin_file(const std::string& path);

// load_plugin_file() turned into a PluginInfo (usable, or the problem); never throws.
PluginInfo probe_plugin_file(const std::string& path, const std::string& backend);

}  // namespace wt
