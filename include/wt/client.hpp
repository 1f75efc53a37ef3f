// The trainer's view of the inference side: vLLM's four control-plane calls with JSON payloads,
// plus ending an update after a trainer-side failure. Implementations reach every replica, block
// until all are done, and throw wt::Error on failure. Every call may come from any thread.
#pragma once

#include <wt/requires_cxx20.hpp>

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
  // Ends the current update: the inference side drops what the round delivered and its session
  // ends, so the next start is accepted. Not an error when no update is active. This default does
  // it the way a stock vLLM server understands: an update it must refuse (vLLM ends the session
  // on any failed update); the refusal is expected and not reported.
  virtual void end_weight_update(std::string_view reason);
  // Makes calls blocked in this client return (WT_ERR_ABORTED), for an engine being aborted.
  // Default: nothing to interrupt.
  virtual void abort_calls() {}
  // The same for every call in flight, the ones that end a failed round too: for an engine being
  // destroyed, whose threads must not wait out a deadline on a receiver that is gone. Default:
  // abort_calls().
  virtual void abandon_calls() { abort_calls(); }

  // The C view handed to plugins; valid as long as this object.
  const wt_client* c_client();

 private:
  wt_client c_{};
};

}  // namespace wt
