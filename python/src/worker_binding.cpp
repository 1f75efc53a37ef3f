// wt.WorkerEngine: the inference side of a backend, for an inference engine written in Python.
// receive() hands each tensor to load(name, tensor) as a view valid during the call, or writes it
// into the tensor destination(name) returns (the model's own parameter, say): staged by default
// (into a tensor of wt's beside it, copied over at finish, so that a round that does not finish
// leaves the parameter as it was), or straight into it with staged=False.
#include "bindings.hpp"
#include "dlpack_bridge.hpp"
#include "py_errors.hpp"
#include "py_json.hpp"
#include "py_stream.hpp"
#include "stager.hpp"

#include <wt/dtype.hpp>
#include <wt/engine.hpp>
#include <wt/error.hpp>
#include <wt/sdk/patch_scan.hpp>
#include <wt/sdk/tensor_layout.hpp>

#include <wt/services/sparse_patches.hpp>  // the reference receiver's patch rules, on Python's tensors

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

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
  PyLoader(py::object load, py::object destination, py::object patch_into,
           CallbackFailures& failures, Stager* stager)
      : load_(std::move(load)),
        destination_(std::move(destination)),
        patch_into_(std::move(patch_into)),
        failures_(failures),
        stager_(stager) {}
  ~PyLoader() override {
    py::gil_scoped_acquire g;
    held_.clear();
    load_ = destination_ = patch_into_ = py::object();
  }

  void load(std::span<const wt_tensor> tensors) override {
    if (load_.is_none())
      throw Error(WT_ERR_UNSUPPORTED,
                  fmt::format("this update sends whole tensors ('{}' first): pass "
                              "receive(..., load=...) to take them",
                              tensors.empty() ? "" : tensors.front().name));
    py::gil_scoped_acquire g;
    for (const wt_tensor& t : tensors) {
      try {
        call_with_view(load_, t.name, t.tensor, "load");
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
    Held h = checked_destination(d, param);
    const DLTensor& t = h.tensor();
    handed_out_.insert(param.name);
    if (stager_ != nullptr) return stager_->stage(param.name, std::move(d), t);
    held_.push_back(std::move(h));
    DLTensor out = held_.back().tensor();
    out.strides = nullptr;  // checked compact: the ABI's form of row-major memory
    return out;
  }

  // Delta backends: patch_into(name) returns the tensor each patch is written into. The whole
  // batch is checked first as the reference receiver checks it (dtype, full_shape equal to the
  // tensor's, indices in range and none twice), so a refused batch changes no tensor; then the
  // values are scattered in place with the GIL released.
  void load_patches(std::span<const wt_sparse_patch> patches) override {
    if (patch_into_.is_none())
      throw Error(
          WT_ERR_UNSUPPORTED,
          fmt::format(
              "this update sends delta patches ('{}' first): pass "
              "receive(..., patch_into=...) returning the tensor each is written "
              "into",
              patches.empty() || patches.front().name == nullptr ? "" : patches.front().name));
    py::gil_scoped_acquire g;  // declared first: the targets below are let go with it held
    struct Target {
      patching::PatchTarget form;
      Held held;
      unsigned char* data = nullptr;
    };
    std::map<std::string, Target> targets;
    const std::vector<patching::PatchForm> forms = patching::check_patch_forms(
        patches, [&](const std::string& name) -> const patching::PatchTarget* {
          if (auto it = targets.find(name); it != targets.end()) return &it->second.form;
          py::object t;
          try {
            t = patch_into_(py::str(name));
          } catch (py::error_already_set& e) {
            failures_.rethrow(e, WT_ERR_INVALID_ARGUMENT,
                              fmt::format("patch_into('{}') raised", name));
          }
          if (t.is_none()) return nullptr;  // refused, naming the parameter
          Held h = to_dlpack(t, "patch_into('{}')", name);
          const DLTensor& d = h.tensor();
          if (d.device.device_type != kDLCPU || !is_compact(d))
            throw Error(WT_ERR_INVALID_ARGUMENT,
                        fmt::format("patch_into('{}') returned a {}{} tensor: patches are "
                                    "written into contiguous host memory",
                                    name, describe(d), is_compact(d) ? "" : " non-contiguous"));
          Target& slot = targets[name];
          slot.form = {d.dtype, std::vector<int64_t>(d.shape, d.shape + d.ndim)};
          slot.data = static_cast<unsigned char*>(d.data) + d.byte_offset;
          slot.held = std::move(h);
          return &slot.form;
        });
    py::gil_scoped_release r;
    // The indices are copied before they are checked: what is applied is what was checked.
    std::vector<std::vector<int32_t>> indices(forms.size());
    std::vector<const int32_t*> at(forms.size());
    std::vector<IndexScan> scans(forms.size());
    for (std::size_t k = 0; k < forms.size(); ++k) {
      const auto n = static_cast<std::size_t>(forms[k].count);
      indices[k].resize(n);
      if (n > 0) std::memcpy(indices[k].data(), forms[k].indices, 4 * n);
      at[k] = indices[k].data();
      scans[k] = scan_indices(reinterpret_cast<const unsigned char*>(at[k]), n, forms[k].limit);
    }
    patching::judge_patch_indices(forms, at, scans);
    for (std::size_t k = 0; k < forms.size(); ++k)
      patching::apply_patch(at[k], forms[k].values, forms[k].count, forms[k].element_size,
                          targets.at(forms[k].name).data);
  }

  void written(const std::string& name) override {
    if (!handed_out_.count(name))
      throw Error(WT_ERR_STATE,
                  fmt::format("written('{}'): no destination was handed out for it", name));
  }

 private:
  py::object load_, destination_, patch_into_;
  CallbackFailures& failures_;
  Stager* stager_;         // null: destinations are written in place
  std::deque<Held> held_;  // destinations, referenced until receive returns
  std::set<std::string> handed_out_;
};

class PyWorker {
 public:
  PyWorker(const std::string& backend, py::object init_info, const std::string& device,
           py::object options, bool staged, py::object stream) {
    if (staged) stager_.emplace();
    WorkerOptions o;
    o.device = parse_device(device);
    void* const s = stream_of(stream, "stream");
    if (o.device.device_type == kDLCUDA) o.stream = s;  // host memory orders against nothing
    if (!options.is_none()) o.backend_options = json_object(options, "options");
    const std::string info = json_text(init_info, "init_info");
    py::gil_scoped_release r;
    engine_ = WorkerEngine::create(backend, info, o);
  }
  ~PyWorker() {
    {
      py::gil_scoped_release r;
      engine_.reset();
    }
    stager_.reset();
  }

  void start() {
    if (stager_) stager_->drop();
    py::gil_scoped_release r;
    engine_->start();
  }
  void receive(py::object update_info, py::object load, py::object destination,
               py::object patch_into) {
    const std::string info = json_text(update_info, "update_info");
    PyLoader loader(std::move(load), std::move(destination), std::move(patch_into), failures_,
                    stager_ ? &*stager_ : nullptr);
    try {
      py::gil_scoped_release r;
      engine_->receive(info, loader);
    } catch (const Error& e) {
      raise(e, failures_.take());
    }
    failures_.take();
  }
  void finish() {
    try {
      py::gil_scoped_release r;
      engine_->finish();
    } catch (...) {
      if (stager_) stager_->drop();
      throw;
    }
    if (stager_) stager_->commit();
  }
  void abort() {
    if (stager_) stager_->drop();
    py::gil_scoped_release r;
    engine_->abort();
  }

 private:
  CallbackFailures failures_;
  std::optional<Stager> stager_;  // staged=True
  std::unique_ptr<WorkerEngine> engine_;
};

}  // namespace

void bind_worker(py::module_& m) {
  py::class_<PyWorker>(m, "WorkerEngine",
                       "The inference side of `backend`, made from the init info the trainer "
                       "shipped: start(), receive(update_info, load, destination=None, "
                       "patch_into=None) per update, finish(). staged=True (the default): "
                       "what the backend writes for a destination lands in a staging tensor of "
                       "wt's and is copied into the destination at finish(); staged=False: "
                       "straight into it.")
      .def(py::init<const std::string&, py::object, const std::string&, py::object, bool,
                    py::object>(),
           py::arg("backend"), py::arg("init_info"), py::arg("device") = "cpu",
           py::arg("options") = py::none(), py::arg("staged") = true,
           py::arg("stream") = py::none())
      .def("start", &PyWorker::start)
      .def("receive", &PyWorker::receive, py::arg("update_info"), py::arg("load") = py::none(),
           py::arg("destination") = py::none(), py::arg("patch_into") = py::none())
      .def("finish", &PyWorker::finish)
      .def("abort", &PyWorker::abort);
}

}  // namespace wt::python
