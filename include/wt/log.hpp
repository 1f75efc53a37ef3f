// libwt logging: spdlog, level from WT_LOG_LEVEL (trace|debug|info|warn|error|off; default warn).
// Plugin messages arrive through the wt_host_api log callback and go to the logger "wt.<backend>".
#pragma once

#include <wt/requires_cxx20.hpp>

#include <spdlog/logger.h>

#include <memory>
#include <string>
#include <string_view>

namespace wt {

// The logger for libwt itself ("wt") or for one plugin ("wt.<backend>"); created on first use.
std::shared_ptr<spdlog::logger> logger(const std::string& name = "wt");

// Re-reads WT_LOG_LEVEL and applies it to every wt logger.
void reload_log_level();

// A JSON text (an init info, an update info, a request body) as it may appear in a log line: the
// value of every key that carries a secret, at any depth, replaced by "<redacted>" (session_secret
// and any key ending in "secret", token, password, "_key" or "_keys" (rank_keys), and
// nccl_unique_id_b64, which lets its holder join the NCCL group). Text that is not JSON is not logged at all ("<not JSON: N bytes>"). At most
// `max_chars` characters of the result, then "...". Every log line that shows such a text goes
// through this.
std::string redacted_json(std::string_view json_text, std::size_t max_chars = 512);

}  // namespace wt
