// The trainer's view of the inference side: vLLM's four control-plane calls with JSON payloads.
// Implementations reach every replica, block until all are done, and throw wt::Error on failure.
#pragma once

#include <wt/wt_plugin.h>

#include <optional>
#include <string>
#include <string_view>

namespace wt {

class Client {
 public:
  virtual ~Client() = default;
  virtual void init_weight_transfer_engine(std::string_view init_info_json) = 0;
  virtual void start_weight_update() = 0;
  // May be called from a side thread while the caller's thread transmits data.
  virtual void update_weights(std::string_view update_info_json) = 0;
  virtual void finish_weight_update(const std::optional<std::string>& weight_version) = 0;

  // The C view handed to plugins; valid as long as this object.
  const wt_client* c_client();

 private:
  wt_client c_{};
};

}  // namespace wt
