// libwt logging: spdlog, level from WT_LOG_LEVEL (trace|debug|info|warn|error|off; default warn).
// Plugin messages arrive through the wt_host_api log callback and go to the logger "wt.<backend>".
#pragma once

#include <wt/requires_cxx20.hpp>

#include <spdlog/logger.h>

#include <memory>
#include <string>

namespace wt {

// The logger for libwt itself ("wt") or for one plugin ("wt.<backend>"); created on first use.
std::shared_ptr<spdlog::logger> logger(const std::string& name = "wt");

// Re-reads WT_LOG_LEVEL and applies it to every wt logger.
void reload_log_level();

}  // namespace wt
