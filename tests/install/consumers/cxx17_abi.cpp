// A plugin in C++17 against the installed C ABI alone (wt::plugin_abi): the header compiles as
// C++17 with -pedantic -Werror, and the entry point negotiates like any other plugin's.
#include <wt/wt_plugin.h>

#include <cstdlib>

static_assert(__cplusplus >= 201703L && __cplusplus < 202002L, "built as C++17");

struct wt_init_info {
  int64_t rank;
};

namespace {

wt_status parse_json(const wt_host_api*, const char*, wt_init_info** out, char*, size_t,
                     char* field, size_t field_cap) {
  if (field != nullptr && field_cap > 0) field[0] = '\0';
  *out = static_cast<wt_init_info*>(std::calloc(1, sizeof **out));
  return *out != nullptr ? WT_OK : WT_ERR_SYSTEM;
}
wt_status to_json(const wt_init_info*, char* buf, size_t cap, size_t* needed) {
  static const char kText[] = "{\"backend\":\"cxx17abi\",\"rank\":0}";
  *needed = sizeof kText;
  if (buf == nullptr || cap < sizeof kText) return WT_ERR_BUFFER_TOO_SMALL;
  for (size_t i = 0; i < sizeof kText; ++i) buf[i] = kText[i];
  return WT_OK;
}
int64_t rank(const wt_init_info* i) {
  return i->rank;
}
int32_t is_sender(const wt_init_info* i) {
  return i->rank == 0;
}
void destroy(wt_init_info* i) {
  std::free(i);
}

const wt_init_info_vtable kInitInfo = {
    sizeof(wt_init_info_vtable), WT_ABI_VERSION, parse_json, to_json, rank, is_sender, destroy};
const wt_plugin_api kApi = {
    sizeof(wt_plugin_api), WT_ABI_VERSION, "cxx17abi", "1.0.0", 0, &kInitInfo, nullptr, nullptr};

}  // namespace

extern "C" WT_PLUGIN_EXPORT wt_status wt_plugin_get(uint32_t host_abi, uint32_t* plugin_abi,
                                                    const wt_plugin_api** api) {
  *plugin_abi = WT_ABI_VERSION;
  if (host_abi < WT_ABI_VERSION) return WT_ERR_INCOMPATIBLE;
  *api = &kApi;
  return WT_OK;
}
