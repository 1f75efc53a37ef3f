// The engine functions every test plugin shares (test_plugin_engines.cpp, compiled once) and the
// variant each plugin file describes (test_plugin.cpp, compiled per variant with its macros).
#pragma once

#include <wt/wt_plugin.h>

#include <cstddef>

namespace wt::test_plugin {

struct Variant {
  const char* declared;  // the backend name the plugin declares (and its messages use)
  bool init_fails;       // trainer create returns WT_ERR_SYSTEM
  bool throws;           // trainer create throws a C++ exception internally
  bool wide;             // tensor elements 16 bytes wider than this ABI's wt_tensor
  bool forges;           // to_json writes fake conformance verdicts into every pipe it can reach
  bool leaks;            // trainer create leaks a descriptor, a temp file and a daemon process
  bool deaf_abort;       // send_weights calls update_weights first, and that receive ignores abort
  bool retries;          // send_weights retries a failed update_weights for 60 s
};
const Variant& variant();  // defined by each variant's test_plugin.cpp

// Finds this run's nonce in the process's own memory (a report line the checks wrote earlier),
// writes pass verdicts for the running check and every later one, in order and carrying the nonce,
// into every pipe the process holds, and exits 0, as the checks process would after a clean run.
// Returns when no nonce is found (not in `wt conformance`'s checks process).
void forge_verdicts_with_nonce();

wt_status parse(const wt_host_api*, const char* json, wt_init_info** out, char* err, size_t cap,
                char* field, size_t field_cap);
wt_status to_json(const wt_init_info* info, char* buf, size_t cap, size_t* needed);
int64_t rank(const wt_init_info* info);
int32_t is_sender(const wt_init_info* info);
void destroy_info(wt_init_info* info);

wt_status trainer_create(const wt_trainer_create_args* args, wt_trainer** out, char* err,
                         size_t cap);
wt_status send_weights(wt_trainer* t, const wt_send_args* args);
wt_status trainer_abort(wt_trainer*);
const char* trainer_last_error(const wt_trainer* t);
void trainer_destroy(wt_trainer* t);

wt_status worker_create(const wt_worker_create_args*, wt_worker** out, char*, size_t);
wt_status worker_start(wt_worker* w);
wt_status worker_receive(wt_worker* w, const char* json, const wt_loader* loader);
wt_status worker_finish(wt_worker* w);
wt_status worker_abort(wt_worker* w);
const char* worker_last_error(const wt_worker* w);
void worker_destroy(wt_worker* w);

}  // namespace wt::test_plugin
