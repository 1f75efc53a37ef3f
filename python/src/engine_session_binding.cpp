// wt.EngineSession: vLLM's routes over a Python engine's own parameters — wt::EngineSession
// behind wt's HTTP server, the same server `wt serve` is. Each round is staged beside the
// parameters and copied into them when it finishes; a round that does not finish leaves them
// as they were. No copy of the model beyond the staging is held (wt.Receiver keeps its own).
#include "bindings.hpp"
#include "dlpack_bridge.hpp"
#include "py_json.hpp"
#include "serving.hpp"
#include "stager.hpp"

#include <wt/checksum.hpp>
#include <wt/error.hpp>
#include <wt/services/engine_session.hpp>
#include <wt/services/http_server.hpp>

#include <fmt/format.h>

#include <memory>
#include <optional>

namespace wt::python {

namespace {

// The engine's parameters, a dict name -> tensor, as wt::EngineMemory (the GIL taken for each
// call that touches Python).
class ParamsMemory final : public EngineMemory {
 public:
  explicit ParamsMemory(py::object params) : params_(std::move(params)) {}
  ~ParamsMemory() override {
    py::gil_scoped_acquire g;
    stager_.clear();
    params_ = py::object();
  }

  std::optional<DLTensor> destination(const ParamMeta& param) override {
    py::gil_scoped_acquire g;
    py::object d = params_.attr("get")(py::str(param.name));
    if (d.is_none()) return std::nullopt;                  // load() then names it
    if (py::hasattr(d, "detach")) d = d.attr("detach")();  // a Parameter: its memory, not its graph
    Held h = checked_destination(d, param);
    return stager_.stage(param.name, std::move(d), h.tensor());
  }
  void written(const std::string&) override {}
  void load(std::span<const wt_tensor> tensors) override {
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("the update sends tensor '{}', which the engine's parameters do not "
                            "have",
                            tensors.empty() ? "" : tensors.front().name));
  }
  void commit() override {
    py::gil_scoped_acquire g;
    stager_.commit();
  }
  void discard() override {
    py::gil_scoped_acquire g;
    stager_.drop();
  }
  std::map<std::string, std::string> checksums() const override {
    py::gil_scoped_acquire g;
    std::map<std::string, std::string> sums;
    for (auto item : params_.attr("items")()) {
      auto pair = py::reinterpret_borrow<py::tuple>(item);
      py::object t = pair[1];
      if (py::hasattr(t, "detach")) t = t.attr("detach")();
      if (py::hasattr(t, "is_cuda") && t.attr("is_cuda").cast<bool>()) t = t.attr("cpu")();
      const std::string name = py::str(pair[0]);
      Held h = to_dlpack(t, "parameter '{}'", name);
      sums[name] = checksum_tensor(h.tensor());
    }
    return sums;
  }

 private:
  py::object params_;
  Stager stager_;
};

class PyEngineSession {
 public:
  PyEngineSession(const std::string& backend, py::object params, const std::string& device,
                  py::object options) {
    if (py::hasattr(params, "named_parameters"))  // an nn.Module: its parameters, by name
      params = py::dict(params.attr("named_parameters")());
    if (!py::isinstance<py::dict>(params))
      throw invalid(fmt::format("params is a {}: pass an nn.Module or a dict name -> tensor",
                                type_name(params)));
    WorkerOptions o;
    o.device = parse_device(device);
    if (!options.is_none()) o.backend_options = json_object(options, "options");
    // What the engine holds, so that a backend whose init fixes what arrives (m2n's plan and
    // engine layout) refuses a disagreement at init, naming the parameter.
    for (auto item : params.attr("items")()) {
      auto pair = py::reinterpret_borrow<py::tuple>(item);
      const std::string name = py::str(pair[0]);
      py::object t = pair[1];
      if (py::hasattr(t, "detach")) t = t.attr("detach")();
      Held h = to_dlpack(t, "parameter '{}'", name);
      const DLTensor& d = h.tensor();
      o.held.push_back({name, d.dtype, std::vector<int64_t>(d.shape, d.shape + d.ndim)});
    }
    memory_ = std::make_unique<ParamsMemory>(std::move(params));
    session_ = std::make_unique<EngineSession>(backend, *memory_, o);
  }
  ~PyEngineSession() {
    {
      py::gil_scoped_release r;  // a round ending calls back into Python
      server_.reset();
      session_.reset();
    }
    memory_.reset();
  }

  std::string serve(const std::string& host, int port, const std::string& token) {
    server_ = start_serving(*session_, server_, "this session", host, port, token);
    return server_->url();
  }
  void stop() {
    py::gil_scoped_release r;
    server_.reset();
  }
  std::optional<std::string> weight_version() const { return session_->weight_version(); }

 private:
  std::unique_ptr<ParamsMemory> memory_;
  std::unique_ptr<EngineSession> session_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace

void bind_engine_session(py::module_& m) {
  py::class_<PyEngineSession>(
      m, "EngineSession",
      "vLLM's weight-transfer routes over the engine's own parameters (an nn.Module or a dict "
      "name -> tensor): serve() returns the URL. Each round is staged beside the parameters and "
      "copied into them when it finishes; one that does not finish leaves them as they were.")
      .def(py::init<const std::string&, py::object, const std::string&, py::object>(),
           py::arg("backend"), py::arg("params"), py::arg("device") = "cpu",
           py::arg("options") = py::none())
      .def("serve", &PyEngineSession::serve, py::arg("host") = "127.0.0.1", py::arg("port") = 0,
           py::arg("token") = "")
      .def("stop", &PyEngineSession::stop)
      .def_property_readonly("weight_version", &PyEngineSession::weight_version);
}

}  // namespace wt::python
