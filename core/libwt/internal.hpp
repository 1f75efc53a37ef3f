// libwt internals shared by its source files; not installed.
#pragma once

#include <wt/error.hpp>
#include <wt/registry.hpp>
#include <wt/sdk/errors.hpp>
#include <wt/tensor.hpp>

#include "plugin_table.hpp"

#include <memory>
#include <string>

namespace wt {

// An init info parsed by its plugin. Destroys the plugin object with the plugin's own destroy.
struct ParsedInitInfo {
  std::shared_ptr<const Plugin> plugin;
  wt_init_info* object = nullptr;
  ParsedInitInfo(std::shared_ptr<const Plugin> p, wt_init_info* o)
      : plugin(std::move(p)), object(o) {}
  ~ParsedInitInfo() { plugin->table().destroy_init_info(object); }
  ParsedInitInfo(const ParsedInitInfo&) = delete;
  ParsedInitInfo& operator=(const ParsedInitInfo&) = delete;
};

// Runs f() inside a host-implemented vtable slot: every exception becomes a status plus a
// message in the caller's buffer, so nothing C++ crosses back into a plugin.
template <typename F>
wt_status host_guard(char* err, std::size_t cap, F&& f) noexcept {
  try {
    f();
    return WT_OK;
  } catch (const Error& e) {  // wt::sdk::Error too: the same type
    sdk::write_message(err, cap, e.what());
    return e.code();
  } catch (const std::exception& e) {
    sdk::write_message(err, cap, e.what());
    return WT_ERR_INTERNAL;
  } catch (...) {
    sdk::write_message(err, cap, "unknown exception");
    return WT_ERR_INTERNAL;
  }
}

// The C view of one parameter (its strings and shape stay m's).
inline wt_param_meta c_param_meta(const ParamMeta& m) {
  return {sizeof(wt_param_meta),
          WT_ABI_VERSION,
          m.name.c_str(),
          m.dtype,
          static_cast<int32_t>(m.shape.size()),
          m.shape.data(),
          m.sharded() ? 1 : 0,
          m.sharded() ? m.shard_dim : 0,
          m.sharded() ? m.shard_offset : 0,
          m.sharded() ? m.shard_length : 0};
}

}  // namespace wt
