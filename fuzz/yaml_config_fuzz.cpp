// YAML as wt reads it: a `wt launch` config file, and a YAML init info.
#include "fuzz_input.hpp"
#include "launch_config.hpp"

#include <wt/error.hpp>
#include <wt/services/yaml_json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  wt::fuzz::MemFile file(data, size);
  if (!file.ok()) return 0;
  try {
    (void)wt::cli::load_launch_config(file.path());
  } catch (const wt::Error&) {
  }
  try {
    (void)wt::yaml_to_json(wt::load_yaml(wt::fuzz::as_text(data, size), "fuzz.yaml"));
  } catch (const wt::Error&) {
  }
  return 0;
}
