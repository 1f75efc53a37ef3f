// A version-2 plugin's table, called as it is.
#include "plugin_table.hpp"

namespace wt::detail {
namespace {

class TableV2 final : public PluginTable {
 public:
  explicit TableV2(const wt_plugin_api* api) : api_(api) {}

  wt_status parse_init_info(const wt_host_api* host, const char* json, wt_init_info** out,
                            char* err, size_t err_cap, char* field,
                            size_t field_cap) const override {
    return api_->init_info->parse_json(host, json, out, err, err_cap, field, field_cap);
  }
  wt_status init_info_to_json(const wt_init_info* info, char* buf, size_t cap,
                              size_t* needed) const override {
    return api_->init_info->to_json(info, buf, cap, needed);
  }
  int64_t rank(const wt_init_info* info) const override { return api_->init_info->rank(info); }
  bool is_sender(const wt_init_info* info) const override {
    return api_->init_info->is_sender(info) != 0;
  }
  void destroy_init_info(wt_init_info* info) const override { api_->init_info->destroy(info); }

  wt_status create_trainer(const wt_trainer_create_args& args, wt_trainer** out, char* err,
                           size_t err_cap) const override {
    return api_->trainer->create(&args, out, err, err_cap);
  }
  wt_status send_weights(wt_trainer* e, const wt_send_args& args) const override {
    return api_->trainer->send_weights(e, &args);
  }
  wt_status abort_trainer(wt_trainer* e) const override { return api_->trainer->abort(e); }
  const char* trainer_last_error(const wt_trainer* e) const override {
    return api_->trainer->last_error(e);
  }
  void destroy_trainer(wt_trainer* e) const override { api_->trainer->destroy(e); }

  wt_status create_worker(const wt_worker_create_args& args, wt_worker** out, char* err,
                          size_t err_cap) const override {
    return api_->worker->create(&args, out, err, err_cap);
  }
  wt_status start(wt_worker* e) const override { return api_->worker->start(e); }
  wt_status receive(wt_worker* e, const char* json, const wt_loader& loader) const override {
    return api_->worker->receive(e, json, &loader);
  }
  wt_status finish(wt_worker* e) const override { return api_->worker->finish(e); }
  wt_status abort_worker(wt_worker* e) const override { return api_->worker->abort(e); }
  const char* worker_last_error(const wt_worker* e) const override {
    return api_->worker->last_error(e);
  }
  void destroy_worker(wt_worker* e) const override { api_->worker->destroy(e); }

 private:
  const wt_plugin_api* api_;
};

}  // namespace

std::unique_ptr<PluginTable> table_v2(const wt_plugin_api* api) {
  return std::make_unique<TableV2>(api);
}

}  // namespace wt::detail
