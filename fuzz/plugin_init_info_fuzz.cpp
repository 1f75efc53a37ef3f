// A plugin's init-info parser through the C ABI, as the host calls it: parse, then every query
// on what parsed. The backend is fixed at compile time (WT_FUZZ_BACKEND).
#include "fuzz_input.hpp"

#include <wt/registry.hpp>

#include "plugin_table.hpp"

#include <cstdlib>
#include <string>

namespace {
std::shared_ptr<const wt::Plugin> plugin;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  plugin = wt::Registry::instance().get(WT_FUZZ_BACKEND);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = wt::fuzz::as_text(data, size);  // NUL-terminated for the C ABI
  const auto& ii = plugin->table();
  wt_init_info* obj = nullptr;
  char err[512];
  char field[128];
  if (ii.parse_init_info(plugin->host(), text.c_str(), &obj, err, sizeof err, field,
                         sizeof field) == WT_OK) {
    if (obj == nullptr) std::abort();  // success must return an object
    size_t needed = 0;
    std::string buf(64, '\0');
    wt_status s = ii.init_info_to_json(obj, buf.data(), buf.size(), &needed);
    if (s == WT_ERR_BUFFER_TOO_SMALL) {
      buf.assign(needed, '\0');
      s = ii.init_info_to_json(obj, buf.data(), buf.size(), &needed);
    }
    if (s != WT_OK) std::abort();
    (void)ii.rank(obj);
    (void)ii.is_sender(obj);
    ii.destroy_init_info(obj);
  }
  return 0;
}
