#include <wt/json_parse.hpp>
#include <wt/log.hpp>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <mutex>
#include <string_view>

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

bool names_a_secret(std::string_view key) {
  auto ends_with = [&](std::string_view tail) {
    return key.size() >= tail.size() && key.substr(key.size() - tail.size()) == tail;
  };
  return ends_with("secret") || ends_with("token") || ends_with("password") || ends_with("_key") ||
         ends_with("_keys") || key == "nccl_unique_id_b64";
}

void redact(nlohmann::json& j) {  // depth bounded by parse_json's limit
  if (j.is_object()) {
    for (auto& [key, value] : j.items()) {
      if (names_a_secret(key))
        value = "<redacted>";
      else
        redact(value);
    }
  } else if (j.is_array()) {
    for (auto& v : j) redact(v);
  }
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

std::string redacted_json(std::string_view json_text, std::size_t max_chars) {
  nlohmann::json j;
  try {
    j = parse_json(json_text);
  } catch (const std::exception&) {
    return "<not JSON: " + std::to_string(json_text.size()) + " bytes>";
  }
  redact(j);
  std::string out = j.dump();
  if (out.size() > max_chars) out = out.substr(0, max_chars) + "...";
  return out;
}

}  // namespace wt
