// The one table engine code calls, whatever ABI version a plugin speaks. Like NCCL's net plugin
// adapters (ncclNet_v6 ... v11 seen through one current ncclNet_t), the registry wraps every
// accepted plugin table in a PluginTable with the current (version 2) semantics: a version-2 table
// is called directly, a version-1 table through adapters that translate arguments both ways. Engine
// code never branches on versions. Not installed.
#pragma once

#include <wt/wt_plugin.h>
#include <wt/wt_plugin_v1.h>

#include <cstdint>
#include <memory>

namespace wt::detail {

class PluginTable {
 public:
  virtual ~PluginTable() = default;

  // init info
  virtual wt_status parse_init_info(const wt_host_api* host, const char* json, wt_init_info** out,
                                    char* err, size_t err_cap, char* field,
                                    size_t field_cap) const = 0;
  // WT_ERR_BUFFER_TOO_SMALL (with *needed) when buf cannot hold the text.
  virtual wt_status init_info_to_json(const wt_init_info* info, char* buf, size_t cap,
                                      size_t* needed) const = 0;
  virtual int64_t rank(const wt_init_info* info) const = 0;
  virtual bool is_sender(const wt_init_info* info) const = 0;
  virtual void destroy_init_info(wt_init_info* info) const = 0;

  // trainer
  virtual wt_status create_trainer(const wt_trainer_create_args& args, wt_trainer** out, char* err,
                                   size_t err_cap) const = 0;
  virtual wt_status send_weights(wt_trainer* engine, const wt_send_args& args) const = 0;
  virtual wt_status abort_trainer(wt_trainer* engine) const = 0;
  virtual const char* trainer_last_error(const wt_trainer* engine) const = 0;
  virtual void destroy_trainer(wt_trainer* engine) const = 0;

  // worker
  virtual wt_status create_worker(const wt_worker_create_args& args, wt_worker** out, char* err,
                                  size_t err_cap) const = 0;
  virtual wt_status start(wt_worker* engine) const = 0;
  virtual wt_status receive(wt_worker* engine, const char* update_info_json,
                            const wt_loader& loader) const = 0;
  virtual wt_status finish(wt_worker* engine) const = 0;
  virtual wt_status abort_worker(wt_worker* engine) const = 0;
  virtual const char* worker_last_error(const wt_worker* engine) const = 0;
  virtual void destroy_worker(wt_worker* engine) const = 0;
};

// `api` has passed validate_api() for its version. The tables are static in the plugin, which is
// never unloaded, so they are referenced, not copied.
std::unique_ptr<PluginTable> table_v2(const wt_plugin_api* api);
std::unique_ptr<PluginTable> table_v1(const wt_plugin_api_v1* api);

}  // namespace wt::detail
