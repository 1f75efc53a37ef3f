// wt.WorkerEngine: the inference side of a backend, for an inference engine written in Python.
// receive() hands each tensor to load(name, tensor) as a view valid during the call, or writes it
// straight into the tensor destination(name) returns (the model's own parameter, say).
#include "bindings.hpp"
#include "dlpack_bridge.hpp"
#include "py_errors.hpp"
#include "py_json.hpp"

#include <wt/dtype.hpp>
#include <wt/engine.hpp>
#include <wt/error.hpp>
#include <wt/sdk/tensor_layout.hpp>

#include <fmt/format.h>

#include <deque>
#include <set>

namespace wt::python {

DLDevice parse_device(const std::string& text) {
  if (text == "cpu") return {kDLCPU, 0};
  if (text == "cuda") return {kDLCUDA, 0};
  if (text.rfind("cuda:", 0) == 0) {
    const std::string n = text.substr(5);
    if (!n.empty() && n.size() <= 4 && n.find_first_not_of("0123456789") == std::string::npos)
      return {kDLCUDA, std::stoi(n)};
  }
  throw Error(WT_ERR_INVALID_ARGUMENT,
              fmt::format("device '{}' is neither \"cpu\" nor \"cuda:N\"", text));
}

namespace {

// The Loader of one receive(): Python's load and destination, called with the GIL.
class PyLoader final : public Loader {
 public:
  PyLoader(py::object load, py::object destination, CallbackFailures& failures)
      : load_(std::move(load)), destination_(std::move(destination)), failures_(failures) {}
  ~PyLoader() override {
    py::gil_scoped_acquire g;
    held_.clear();
    load_ = destination_ = py::object();
  }

  void load(std::span<const wt_tensor> tensors) override {
    py::gil_scoped_acquire g;
    for (const wt_tensor& t : tensors) {
      try {
        load_(py::str(t.name), view_of(t.tensor));
      } catch (py::error_already_set& e) {
        failures_.rethrow(e, WT_ERR_INVALID_ARGUMENT, fmt::format("load('{}') raised", t.name));
      }
    }
  }

  std::optional<DLTensor> destination(const ParamMeta& param) override {
    if (destination_.is_none()) return std::nullopt;
    py::gil_scoped_acquire g;
    py::object d;
    try {
      d = destination_(py::str(param.name));
    } catch (py::error_already_set& e) {
      failures_.rethrow(e, WT_ERR_INVALID_ARGUMENT,
                        fmt::format("destination('{}') raised", param.name));
    }
    if (d.is_none()) return std::nullopt;
    Held h = to_dlpack(d, "destination('{}')", param.name);
    const DLTensor& t = h.tensor();
    const bool same_shape = t.ndim == static_cast<int32_t>(param.shape.size()) &&
                            std::equal(param.shape.begin(), param.shape.end(), t.shape);
    if (!(t.dtype == param.dtype) || !same_shape || !is_compact(t) || t.byte_offset != 0)
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("destination('{}') returned a {}{} tensor, but the update sends {} "
                              "{}",
                              param.name, describe(t), is_compact(t) ? "" : " non-contiguous",
                              torch_name(param.dtype), [&] {
                                std::string s;
                                for (std::size_t i = 0; i < param.shape.size(); ++i)
                                  s += (i ? "x" : "") + std::to_string(param.shape[i]);
                                return s.empty() ? std::string("scalar") : s;
                              }()));
    held_.push_back(std::move(h));
    DLTensor out = held_.back().tensor();
    out.strides = nullptr;  // checked compact: the ABI's form of row-major memory
    handed_out_.insert(param.name);
    return out;
  }

  void written(const std::string& name) override {
    if (!handed_out_.count(name))
      throw Error(WT_ERR_STATE,
                  fmt::format("written('{}'): no destination was handed out for it", name));
  }

 private:
  py::object load_, destination_;
  CallbackFailures& failures_;
  std::deque<Held> held_;  // destinations, referenced until receive returns
  std::set<std::string> handed_out_;
};

class PyWorker {
 public:
  PyWorker(const std::string& backend, py::object init_info, const std::string& device,
           py::object options) {
    WorkerOptions o;
    o.device = parse_device(device);
    if (!options.is_none()) o.backend_options = json_object(options, "options");
    const std::string info = json_text(init_info, "init_info");
    py::gil_scoped_release r;
    engine_ = WorkerEngine::create(backend, info, o);
  }
  ~PyWorker() {
    py::gil_scoped_release r;
    engine_.reset();
  }

  void start() {
    py::gil_scoped_release r;
    engine_->start();
  }
  void receive(py::object update_info, py::object load, py::object destination) {
    const std::string info = json_text(update_info, "update_info");
    PyLoader loader(std::move(load), std::move(destination), failures_);
    try {
      py::gil_scoped_release r;
      engine_->receive(info, loader);
    } catch (const Error& e) {
      raise(e, failures_.take());
    }
    failures_.take();
  }
  void finish() {
    py::gil_scoped_release r;
    engine_->finish();
  }
  void abort() {
    py::gil_scoped_release r;
    engine_->abort();
  }

 private:
  CallbackFailures failures_;
  std::unique_ptr<WorkerEngine> engine_;
};

}  // namespace

void bind_worker(py::module_& m) {
  py::class_<PyWorker>(m, "WorkerEngine",
                       "The inference side of `backend`, made from the init info the trainer "
                       "shipped: start(), receive(update_info, load, destination=None) per "
                       "update, finish().")
      .def(py::init<const std::string&, py::object, const std::string&, py::object>(),
           py::arg("backend"), py::arg("init_info"), py::arg("device") = "cpu",
           py::arg("options") = py::none())
      .def("start", &PyWorker::start)
      .def("receive", &PyWorker::receive, py::arg("update_info"), py::arg("load"),
           py::arg("destination") = py::none())
      .def("finish", &PyWorker::finish)
      .def("abort", &PyWorker::abort);
}

}  // namespace wt::python
