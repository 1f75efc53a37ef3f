/* Compiled with -std=c99 -pedantic -Werror: the ABI header is plain C for third parties. */
#include <wt/wt_plugin.h>

static wt_status entry_signature_check(uint32_t host, uint32_t* plugin, const wt_plugin_api** api) {
  (void)host;
  (void)plugin;
  (void)api;
  return WT_OK;
}

wt_plugin_get_fn wt_abi_c99_check_entry = &entry_signature_check;
