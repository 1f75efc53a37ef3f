// C++20, every library (wt::all): every public header of libwt and its services compiles.
#include <wt/services/checkpoint_gen.hpp>
#include <wt/services/checksum.hpp>
#include <wt/services/fan_out_client.hpp>
#include <wt/services/gloo_trainer_group.hpp>
#include <wt/services/http_client.hpp>
#include <wt/services/http_server.hpp>
#include <wt/services/receiver.hpp>
#include <wt/services/safetensors.hpp>
#include <wt/services/yaml_json.hpp>
#include <wt/wt.hpp>

#include <cstdio>

int main() {
  // A YAML config through wt::yaml, checksummed through wt::receiver's helper.
  auto j = wt::yaml_to_json(wt::load_yaml("backend: ipc\nrank: 0\n", "inline"));
  const std::string text = j.dump();
  std::printf("%s %s\n", text.c_str(), wt::checksum_bytes(text.data(), text.size()).c_str());
  return 0;
}
