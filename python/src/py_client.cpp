#include "py_client.hpp"
#include "py_json.hpp"

#include <fmt/format.h>

namespace wt::python {

PyClient::PyClient(py::object client, CallbackFailures& failures)
    : client_(std::move(client)), failures_(failures) {
  for (const char* m : {"init_weight_transfer_engine", "start_weight_update", "update_weights",
                        "finish_weight_update"})
    if (!py::hasattr(client_, m))
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("client {} has no method {}(): a client needs vLLM's four "
                              "(init_weight_transfer_engine, start_weight_update, "
                              "update_weights, finish_weight_update)",
                              py::repr(client_).cast<std::string>(), m));
}

PyClient::~PyClient() {
  py::gil_scoped_acquire g;
  client_ = py::object();
}

template <typename... Args>
void PyClient::call(const char* method, Args&&... args) {
  py::gil_scoped_acquire g;
  try {
    client_.attr(method)(std::forward<Args>(args)...);
  } catch (py::error_already_set& e) {
    failures_.rethrow(e, WT_ERR_REMOTE, fmt::format("client.{}() raised", method));
  }
}

void PyClient::init_weight_transfer_engine(std::string_view init_info_json) {
  py::gil_scoped_acquire g;
  call("init_weight_transfer_engine", from_json_text(init_info_json));
}

void PyClient::start_weight_update() {
  call("start_weight_update");
}

void PyClient::update_weights(std::string_view update_info_json) {
  py::gil_scoped_acquire g;
  call("update_weights", from_json_text(update_info_json));
}

void PyClient::finish_weight_update(const std::optional<std::string>& weight_version) {
  if (weight_version) {
    call("finish_weight_update", py::str(*weight_version));
  } else {
    call("finish_weight_update");
  }
}

void PyClient::end_weight_update(std::string_view reason) {
  bool has = false;
  {
    py::gil_scoped_acquire g;
    has = py::hasattr(client_, "end_weight_update");
  }
  if (!has) return Client::end_weight_update(reason);  // vLLM's way: an update it refuses
  py::gil_scoped_acquire g;
  call("end_weight_update", py::str(reason.data(), reason.size()));
}

void PyClient::abort_calls() {
  py::gil_scoped_acquire g;
  if (!py::hasattr(client_, "abort_calls")) return;
  try {
    client_.attr("abort_calls")();
  } catch (py::error_already_set&) {
    // abort() must not fail: the engine is being stopped either way
  }
}

}  // namespace wt::python
