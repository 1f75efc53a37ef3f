#include "bindings.hpp"
#include "dlpack_bridge.hpp"
#include "py_errors.hpp"
#include "py_json.hpp"
#include "py_receiver.hpp"
#include "py_source.hpp"
#include "serving.hpp"

#include <wt/error.hpp>

#include <fmt/format.h>
#include <pybind11/stl.h>

namespace wt::python {

PyReceiver::PyReceiver(const std::string& backend, py::object options, const std::string& device,
                       unsigned load_threads, py::object on_commit)
    : on_commit_(std::move(on_commit)) {
  Receiver::Options o;
  o.backend = backend;
  o.device = parse_device(device);
  if (o.device.device_type != kDLCPU)
    throw Error(WT_ERR_UNSUPPORTED,
                "wt.Receiver keeps weights in host memory: device must be \"cpu\" (use wt serve "
                "--device cuda:N for a CUDA receiver)");
  o.load_threads = load_threads;
  if (!options.is_none()) o.backend_options = json_object(options, "options");
  if (!on_commit_.is_none()) {
    if (!PyCallable_Check(on_commit_.ptr()))
      throw Error(WT_ERR_INVALID_ARGUMENT, "on_commit must be callable: on_commit(name, tensor)");
    // Each committed tensor of a finished round, as a view valid during the call, from the
    // thread that finished it (the server's, or the caller's): the engine copies it in.
    PyObject* hook = on_commit_.ptr();  // borrowed: on_commit_ outlives the receiver
    o.on_commit = [hook](std::span<const wt_tensor> tensors) {
      py::gil_scoped_acquire g;
      for (const wt_tensor& t : tensors) {
        try {
          call_with_view(hook, t.name, t.tensor, "on_commit");
        } catch (py::error_already_set& e) {
          throw Error(WT_ERR_REMOTE, fmt::format("on_commit('{}') raised: {}", t.name, e.what()));
        }
      }
    };
  }
  receiver_ = std::make_unique<Receiver>(std::move(o));
}

PyReceiver::~PyReceiver() {
  {
    py::gil_scoped_release r;
    server_.reset();
    receiver_.reset();
  }
  on_commit_ = py::object();
}

std::string PyReceiver::serve(const std::string& host, int port, const std::string& token) {
  server_ = start_serving(*receiver_, server_, "this receiver", host, port, token);
  return server_->url();
}

void PyReceiver::stop() {
  py::gil_scoped_release r;
  server_.reset();
}

void bind_receiver(py::module_& m) {
  py::class_<PyReceiver>(m, "Receiver",
                         "The reference receiver in this process: vLLM's session rules around a "
                         "worker engine of `backend`, the weights in host memory.")
      .def(py::init<const std::string&, py::object, const std::string&, unsigned, py::object>(),
           py::arg("backend"), py::arg("options") = py::none(), py::arg("device") = "cpu",
           py::arg("load_threads") = 0, py::arg("on_commit") = py::none(),
           "on_commit(name, tensor): called for each tensor of a finished round, once the round "
           "is committed (a view valid during the call: copy it into the engine's parameter); a "
           "round that does not finish never reaches it.")
      .def("serve", &PyReceiver::serve, py::arg("host") = "127.0.0.1", py::arg("port") = 0,
           py::arg("token") = "", "Serves vLLM's HTTP routes; returns the URL.")
      .def("stop", &PyReceiver::stop, "Stops serving (the weights stay).")
      .def_property_readonly("url", &PyReceiver::url)
      .def("names", [](PyReceiver& r) { return r.receiver().names(); })
      .def(
          "checksums", [](PyReceiver& r) { return r.receiver().checksums(); },
          "name -> XXH3-64 (hex) of every committed tensor.")
      .def(
          "tensor",
          [](PyReceiver& r, const std::string& name) {
            auto copy = r.receiver().copy_of(name);
            if (!copy)
              throw Error(WT_ERR_NOT_FOUND, fmt::format("the receiver holds no tensor '{}'", name));
            auto held = std::make_shared<Receiver::TensorCopy>(std::move(*copy));
            return owning(held->bytes.data(), held->dtype, held->shape,
                          [held]() mutable { held.reset(); });
          },
          py::arg("name"), "A copy of a committed tensor (torch when importable, else numpy).")
      .def(
          "load_base",
          [](PyReceiver& r, py::object source) {
            CallbackFailures failures;
            PySource s(std::move(source), py::none(), failures);
            try {
              py::gil_scoped_release g;
              r.receiver().load_base(s);
            } catch (const Error& e) {
              raise(e, failures.take());
            }
          },
          py::arg("source"), "Commits these tensors as the weights before any round.")
      .def_property_readonly("weight_version",
                             [](PyReceiver& r) { return r.receiver().weight_version(); })
      .def_property_readonly("rounds_finished",
                             [](PyReceiver& r) { return r.receiver().rounds_finished(); })
      .def_property_readonly("session_active",
                             [](PyReceiver& r) { return r.receiver().session_active(); })
      .def_property_readonly("tensors_written_in_place",
                             [](PyReceiver& r) { return r.receiver().tensors_written_in_place(); });
}

}  // namespace wt::python
