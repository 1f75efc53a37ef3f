/* A plugin in C99 against the installed C ABI alone (wt::plugin_abi): an init info parser with no
 * engines, enough for `wt plugins` to load, check and list it. */
#include <wt/wt_plugin.h>

#include <stdlib.h>
#include <string.h>

struct wt_init_info {
  int64_t rank;
};

static wt_status parse_json(const wt_host_api* host, const char* json, wt_init_info** out,
                            char* err, size_t err_cap, char* field, size_t field_cap) {
  (void)host;
  (void)json;
  (void)err;
  (void)err_cap;
  if (field != NULL && field_cap > 0) field[0] = '\0';
  *out = (wt_init_info*)calloc(1, sizeof **out);
  return *out != NULL ? WT_OK : WT_ERR_SYSTEM;
}
static wt_status to_json(const wt_init_info* info, char* buf, size_t cap, size_t* needed) {
  (void)info;
  *needed = 3;
  if (buf == NULL || cap < 3) return WT_ERR_BUFFER_TOO_SMALL;
  memcpy(buf, "{}", 3);
  return WT_OK;
}
static int64_t rank(const wt_init_info* info) {
  return info->rank;
}
static int32_t is_sender(const wt_init_info* info) {
  return info->rank == 0;
}
static void destroy(wt_init_info* info) {
  free(info);
}

static const wt_init_info_vtable kInitInfo = {
    sizeof(wt_init_info_vtable), WT_ABI_VERSION, parse_json, to_json, rank, is_sender, destroy};
static const wt_plugin_api kApi = {
    sizeof(wt_plugin_api), WT_ABI_VERSION, "abionly", "0.0.1", 0, &kInitInfo, NULL, NULL};

WT_PLUGIN_EXPORT wt_status wt_plugin_get(uint32_t host_abi, uint32_t* plugin_abi,
                                         const wt_plugin_api** api) {
  *plugin_abi = WT_ABI_VERSION;
  if (host_abi < WT_ABI_VERSION) return WT_ERR_INCOMPATIBLE;
  *api = &kApi;
  return WT_OK;
}
