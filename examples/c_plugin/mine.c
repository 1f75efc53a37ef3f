/* A plugin in C99 against the installed C ABI alone (wt::plugin_abi): an init info parser with no
 * engines, enough for `wt plugins` to load, check and list it; the start of a backend in C. Its
 * init info is read strictly with <wt/wt_init_fields.h>; its name and version come from the build
 * (WT_PLUGIN_BACKEND, WT_PLUGIN_VERSION), as docs/plugin-authoring.md section 1 shows. */
#include <wt/wt_init_fields.h>
#include <wt/wt_plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wt_init_info {
  int64_t rank;
  int verbose;
  char label[64];
};

/* {"rank": 0..65535 (default 0), "verbose": bool (default false), "label": string (default "")} */
static wt_status parse_json(const wt_host_api* host, const char* json, wt_init_info** out,
                            char* err, size_t err_cap, char* field, size_t field_cap) {
  wt_fields f;
  wt_init_info info;
  (void)host;
  memset(&info, 0, sizeof info);
  if (wt_fields_parse(&f, json, "init_info for backend '" WT_PLUGIN_BACKEND "'", err, err_cap,
                      field, field_cap) == WT_OK) {
    wt_fields_int(&f, "rank", WT_FIELD_OPTIONAL, 0, 65535, &info.rank);
    wt_fields_bool(&f, "verbose", WT_FIELD_OPTIONAL, &info.verbose);
    wt_fields_string(&f, "label", WT_FIELD_OPTIONAL, info.label, sizeof info.label);
  }
  if (wt_fields_finish(&f) != WT_OK) return f.status;
  *out = (wt_init_info*)malloc(sizeof **out);
  if (*out == NULL) return WT_ERR_SYSTEM;
  **out = info;
  return WT_OK;
}
static wt_status to_json(const wt_init_info* info, char* buf, size_t cap, size_t* needed) {
  char label[6 * sizeof info->label + 3];
  int n;
  wt_fields_quote(info->label, label, sizeof label);
  n = snprintf(buf, buf != NULL ? cap : 0, "{\"label\":%s,\"rank\":%lld,\"verbose\":%s}", label,
               (long long)info->rank, info->verbose ? "true" : "false");
  *needed = (size_t)n + 1;
  return buf != NULL && (size_t)n < cap ? WT_OK : WT_ERR_BUFFER_TOO_SMALL;
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
static const wt_plugin_api kApi = {sizeof(wt_plugin_api),
                                   WT_ABI_VERSION,
                                   WT_PLUGIN_BACKEND,
                                   WT_PLUGIN_VERSION,
                                   0,
                                   &kInitInfo,
                                   NULL,
                                   NULL};

WT_PLUGIN_EXPORT wt_status wt_plugin_get(uint32_t host_abi, uint32_t* plugin_abi,
                                         const wt_plugin_api** api) {
  *plugin_abi = WT_ABI_VERSION;
  if (host_abi < WT_ABI_VERSION) return WT_ERR_INCOMPATIBLE;
  *api = &kApi;
  return WT_OK;
}
