#include <wt/init_info.hpp>

#include <wt/json_parse.hpp>
#include "internal.hpp"

#include <fmt/format.h>

#include <mutex>

namespace wt {
namespace {
std::mutex& parse_mutex() {
  static std::mutex mu;
  return mu;
}
}  // namespace

InitInfo InitInfo::from_object(const nlohmann::json& object, const std::string& origin) {
  if (!object.is_object())
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("{}: expected an object with a 'backend' key", origin));
  auto it = object.find("backend");
  if (it == object.end())
    throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("{}: missing field 'backend'", origin));
  if (!it->is_string() || it->get<std::string>().empty())
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("{}: field 'backend' must be a non-empty string", origin));
  InitInfo info;
  info.backend_ = it->get<std::string>();
  info.fields_ = object;
  info.fields_.erase("backend");
  info.origin_ = origin;
  return info;
}

InitInfo InitInfo::from_json(std::string_view text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = parse_json(text);
  } catch (const JsonError& e) {
    throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("{}: {}", origin, e.what()));
  }
  return from_object(j, origin);
}

const ParsedInitInfo& InitInfo::parsed() const {
  std::lock_guard<std::mutex> lock(parse_mutex());
  if (!parsed_) {
    auto plugin = Registry::instance().get(backend_);
    nlohmann::json full = fields_;
    full["backend"] = backend_;
    std::string text = full.dump();
    wt_init_info* obj = nullptr;
    char err[4096] = {0};
    char field[256] = {0};
    wt_status s = plugin->table().parse_init_info(plugin->host(), text.c_str(), &obj, err,
                                                  sizeof err, field, sizeof field);
    if (s != WT_OK || obj == nullptr)
      throw FieldError(
          s != WT_OK ? s : WT_ERR_INTERNAL,
          fmt::format("{}: {}", origin_, err[0] ? err : "the plugin rejected it without a reason"),
          field);
    parsed_ = std::make_shared<const ParsedInitInfo>(plugin, obj);
  }
  return *parsed_;
}

int64_t InitInfo::rank() const {
  const auto& p = parsed();
  return p.plugin->table().rank(p.object);
}

bool InitInfo::is_sender() const {
  const auto& p = parsed();
  return p.plugin->table().is_sender(p.object);
}

nlohmann::json InitInfo::to_json() const {
  const auto& p = parsed();
  std::size_t needed = 0;
  std::string buf(256, '\0');
  const auto& t = p.plugin->table();
  wt_status s = t.init_info_to_json(p.object, buf.data(), buf.size(), &needed);
  if (s == WT_ERR_BUFFER_TOO_SMALL && needed > buf.size()) {
    buf.assign(needed, '\0');
    s = t.init_info_to_json(p.object, buf.data(), buf.size(), &needed);
  }
  if (s != WT_OK)
    throw Error(
        s, fmt::format("{}: the {} plugin could not serialise its init info", origin_, backend_));
  nlohmann::json j;
  try {
    j = parse_json(buf.c_str());
  } catch (const JsonError& e) {
    throw Error(WT_ERR_INTERNAL, fmt::format("{}: the {} plugin serialised its init info as {}",
                                             origin_, backend_, e.what()));
  }
  if (!j.is_object())
    throw Error(WT_ERR_INTERNAL,
                fmt::format("{}: the {} plugin serialised its init info as a non-object", origin_,
                            backend_));
  j["backend"] = backend_;
  return j;
}

}  // namespace wt
