#include <wt/log.hpp>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <mutex>

namespace wt {
namespace {

spdlog::level::level_enum level_from_env() {
  const char* v = std::getenv("WT_LOG_LEVEL");
  if (v == nullptr || *v == '\0') return spdlog::level::warn;
  auto level = spdlog::level::from_str(v);  // unknown names map to "off"
  if (level == spdlog::level::off && std::string(v) != "off") {
    spdlog::level::level_enum fallback = spdlog::level::warn;
    return fallback;
  }
  return level;
}

std::mutex& log_mutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

std::shared_ptr<spdlog::logger> logger(const std::string& name) {
  std::lock_guard<std::mutex> lock(log_mutex());
  if (auto existing = spdlog::get(name)) return existing;
  auto l = spdlog::stderr_color_mt(name);
  l->set_level(level_from_env());
  l->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %v");
  return l;
}

void reload_log_level() {
  auto level = level_from_env();
  spdlog::apply_all([level](const std::shared_ptr<spdlog::logger>& l) { l->set_level(level); });
}

}  // namespace wt
