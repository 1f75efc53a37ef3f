// Plugin logging through the host's callback (wt_host_api.log); plugins own no logger.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/wt_plugin.h>

#include <fmt/format.h>

#include <string>
#include <utility>

namespace wt::sdk {

class HostLog {
 public:
  HostLog() = default;
  HostLog(const wt_host_api* host, std::string prefix) : host_(host), prefix_(std::move(prefix)) {}

  bool enabled(int32_t level) const {
    return host_ != nullptr && host_->log != nullptr && level >= host_->log_level;
  }

  template <typename... Args>
  void log(int32_t level, fmt::format_string<Args...> f, Args&&... args) const {
    if (!enabled(level)) return;
    std::string msg = prefix_ + fmt::format(f, std::forward<Args>(args)...);
    host_->log(host_->user_data, level, msg.c_str());
  }
  template <typename... Args>
  void debug(fmt::format_string<Args...> f, Args&&... args) const {
    log(WT_LOG_DEBUG, f, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void info(fmt::format_string<Args...> f, Args&&... args) const {
    log(WT_LOG_INFO, f, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void warn(fmt::format_string<Args...> f, Args&&... args) const {
    log(WT_LOG_WARN, f, std::forward<Args>(args)...);
  }

 private:
  const wt_host_api* host_ = nullptr;
  std::string prefix_;
};

}  // namespace wt::sdk
