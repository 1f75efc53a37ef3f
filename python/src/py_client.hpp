// A Client written in Python: any object with vLLM's four methods (init_weight_transfer_engine,
// start_weight_update, update_weights, finish_weight_update) taking vLLM's JSON-able payloads
// (dicts), and optionally end_weight_update(reason) and abort_calls(). A method that raises fails
// the round with its message; the caller's exception then has it as its __cause__.
#pragma once

#include "py_errors.hpp"

#include <wt/client.hpp>

namespace wt::python {

class PyClient final : public Client {
 public:
  PyClient(py::object client, CallbackFailures& failures);  // GIL held
  ~PyClient() override;

  void init_weight_transfer_engine(std::string_view init_info_json) override;
  void start_weight_update() override;
  void update_weights(std::string_view update_info_json) override;
  void finish_weight_update(const std::optional<std::string>& weight_version) override;
  void end_weight_update(std::string_view reason) override;
  void abort_calls() override;

 private:
  // Calls method(args...) with the GIL; a Python exception becomes WT_ERR_REMOTE naming it.
  template <typename... Args>
  void call(const char* method, Args&&... args);
  py::object client_;
  CallbackFailures& failures_;
};

}  // namespace wt::python
