// trainer_init and the trainer engine: the client and the source a PyTorch loop has, a round with
// the GIL released, abort from any thread, Ctrl-C.
#include "bindings.hpp"
#include "dlpack_bridge.hpp"
#include "launcher_group.hpp"
#include "py_client.hpp"
#include "py_errors.hpp"
#include "py_group.hpp"
#include "py_json.hpp"
#include "py_receiver.hpp"
#include "py_source.hpp"
#include "py_stream.hpp"

#include <wt/delta.hpp>
#include <wt/engine.hpp>
#include <wt/init_info.hpp>
#include <wt/registry.hpp>
#include <wt/services/fan_out_client.hpp>
#include <wt/services/http_client.hpp>
#include <wt/services/receiver.hpp>
#include <wt/services/world_size.hpp>

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <deque>
#include <functional>
#include <memory>
#include <vector>

namespace wt::python {

namespace {

// What send_weights(patches=...) takes: one delta patch, as vLLM's sparse trainer describes it.
struct SparsePatch {
  std::string name;
  py::object indices;  // 1-D int32 flat indices, increasing
  py::object values;   // 1-D, the parameter's dtype
  std::vector<int64_t> full_shape;
};

// The client trainer_init was given, made into a wt::Client: a URL, a list of them (fan-out), a
// wt.HttpClient, a wt.Receiver (in this process) or any object with vLLM's four methods.
struct ClientChoice {
  std::vector<std::unique_ptr<HttpClient>> owned;
  std::unique_ptr<Client> made;  // fan-out, in-process or Python
  py::object keep;               // the Python object behind it, kept alive
  Client* client = nullptr;
  // The worker ranks behind it (vLLM's /get_world_size, summed over a fan-out's replicas), asked
  // only when the init info needs a world_size; called without the GIL (run_interruptible), and
  // ended by abandon_calls().
  std::function<int()> world;
};

ClientChoice choose_client(py::object client, CallbackFailures& failures) {
  ClientChoice c;
  c.keep = client;
  auto is_url_list = [&] {
    if (!py::isinstance<py::list>(client) && !py::isinstance<py::tuple>(client)) return false;
    for (py::handle h : client)
      if (!py::isinstance<py::str>(h) && !py::isinstance<HttpClient>(h)) return false;
    return py::len(client) > 0;
  };
  auto ask = [](HttpClient* h) { return [h] { return h->world_size(); }; };
  if (py::isinstance<py::str>(client)) {
    c.owned.push_back(std::make_unique<HttpClient>(client.cast<std::string>()));
    c.client = c.owned.back().get();
    c.world = ask(c.owned.back().get());
  } else if (py::isinstance<HttpClient>(client)) {
    c.client = &client.cast<HttpClient&>();
    c.world = ask(&client.cast<HttpClient&>());
  } else if (py::isinstance<PyReceiver>(client)) {
    Receiver& receiver = client.cast<PyReceiver&>().receiver();
    c.made = std::make_unique<InProcessClient>(receiver);
    c.client = c.made.get();
    c.world = [&receiver] { return receiver.world_size(); };
  } else if (is_url_list()) {
    std::vector<FanOutClient::Replica> replicas;
    std::vector<HttpClient*> clients;
    for (py::handle h : client) {
      if (py::isinstance<py::str>(h)) {
        c.owned.push_back(std::make_unique<HttpClient>(h.cast<std::string>()));
        clients.push_back(c.owned.back().get());
      } else {
        clients.push_back(&h.cast<HttpClient&>());
      }
    }
    {
      py::gil_scoped_release r;
      for (HttpClient* h : clients) replicas.push_back({h, h->world_size(), h->base_url()});
    }
    auto fan_out = std::make_unique<FanOutClient>(std::move(replicas));
    c.world = [f = fan_out.get()] { return f->world_size(); };
    c.made = std::move(fan_out);
    c.client = c.made.get();
  } else {
    c.made = std::make_unique<PyClient>(client, failures);
    c.client = c.made.get();
    c.world = [client, &failures] {
      py::gil_scoped_acquire g;
      if (!py::hasattr(client, "get_world_size"))
        throw Error(WT_ERR_INVALID_ARGUMENT,
                    "init_info has no world_size, and the client has no get_world_size() to "
                    "count its worker ranks: give init_info['world_size'] (1 + the worker ranks) "
                    "or a client with get_world_size()");
      try {
        return client.attr("get_world_size")().cast<int>();
      } catch (py::error_already_set& e) {
        failures.rethrow(e, WT_ERR_REMOTE, "client.get_world_size()");
      } catch (const py::cast_error&) {
        throw Error(WT_ERR_REMOTE, "client.get_world_size() did not return an integer");
      }
    };
  }
  return c;
}

class PyTrainer {
 public:
  PyTrainer(py::object info, py::object client, py::object source, py::object metadata,
            py::object group) {
    nlohmann::json fields = json_object(info, "init_info");
    client_ = choose_client(std::move(client), failures_);
    // As `wt launch` does: the trainer plus every worker rank behind the client (Ctrl-C ends a
    // receiver that never answers).
    if (world_size_from_receivers(fields)) {
      int world = 0;
      Client* asked = client_.client;
      try {
        run_interruptible([&] { world = client_.world(); }, [asked] { asked->abandon_calls(); },
                          "get_world_size");
      } catch (const Error& e) {
        raise(e, failures_.take());
      }
      fields["world_size"] = world_size_of(world);
    }
    TrainerGroup* trainers = nullptr;
    if (py::isinstance<LauncherGroup>(group)) {
      launcher_group_ = group;  // kept alive with the engine; its collectives stay in C++
      trainers = group.cast<LauncherGroup&>().group();
    } else if (!group.is_none()) {
      group_ = std::make_unique<PyTrainerGroup>(std::move(group), failures_);
      trainers = group_.get();
    }
    const InitInfo init = InitInfo::from_object(fields, "init_info");
    WeightSource* from = nullptr;
    if (py::isinstance<PinnedSource>(source)) {
      pinned_ = source;  // kept alive with the engine
      from = &source.cast<PinnedSource&>();
    } else if (!source.is_none()) {
      source_ = std::make_unique<PySource>(std::move(source), std::move(metadata), failures_);
      from = source_.get();
    }
    // Interruptible: Ctrl-C (or another signal handler's exception) abandons the client's calls
    // in flight, which ends the backend's wait for its receivers at once (the rendezvous gives up
    // when the init call fails) instead of at the control plane's deadline.
    Client* to = client_.client;
    try {
      run_interruptible([&] { engine_ = trainer_init(init, *to, from, trainers); },
                        [to] { to->abandon_calls(); }, "trainer_init");
    } catch (const Error& e) {
      raise(e, failures_.take());
    }
  }

  ~PyTrainer() { close(); }

  void send_weights(py::object weight_version, py::object patches, py::object stream) {
    if (!engine_) throw Error(WT_ERR_STATE, "send_weights on a closed engine");
    SendOptions o;
    o.stream = stream_of(stream, "stream");
    if (!weight_version.is_none()) o.weight_version = weight_version.cast<std::string>();
    std::vector<SparsePatch> given;
    std::vector<Held> held;
    if (!patches.is_none())
      for (py::handle p : patches) given.push_back(p.cast<SparsePatch>());
    held.reserve(given.size() * 2);
    for (const SparsePatch& p : given) {
      wt_sparse_patch c{};
      c.name = p.name.c_str();
      held.push_back(to_dlpack(p.indices, "the indices of patch '{}'", p.name));
      c.indices = held.back().tensor();
      held.push_back(to_dlpack(p.values, "the values of patch '{}'", p.name));
      c.values = held.back().tensor();
      c.full_ndim = static_cast<int32_t>(p.full_shape.size());
      c.full_shape = p.full_shape.data();
      o.patches.push_back(c);
    }
    TrainerEngine* engine = engine_.get();
    try {
      run_interruptible([&] { engine->send_weights(o); }, [engine] { engine->abort(); },
                        "send_weights");
    } catch (const Error& e) {
      raise(e, failures_.take());
    }
    failures_.take();
  }

  void abort() {
    py::gil_scoped_release r;
    if (engine_) engine_->abort();
  }

  // Ends the engine (its threads joined, its communicators closed); idempotent.
  void close() {
    if (!engine_) return;
    std::unique_ptr<TrainerEngine> gone = std::move(engine_);
    py::gil_scoped_release r;
    gone.reset();
  }

  std::string backend() const { return engine_ ? engine_->plugin().backend() : std::string(); }
  bool streams_source() const { return source_ && source_->streaming(); }

 private:
  CallbackFailures failures_;
  ClientChoice client_;
  std::unique_ptr<PySource> source_;
  py::object pinned_;                      // a wt.PinnedSource given as the source
  py::object launcher_group_;              // a wt.LauncherGroup given as the group
  std::unique_ptr<PyTrainerGroup> group_;  // the trainer ranks, when several
  std::unique_ptr<TrainerEngine> engine_;  // last: goes first
};

// make_delta over dicts of tensors: one patch per tensor whose bits changed.
py::list make_delta_py(py::object before, py::object after, unsigned threads) {
  py::list out;
  py::dict prev = py::reinterpret_borrow<py::dict>(py::dict(before));
  for (auto item : py::dict(after)) {
    const std::string name = py::str(item.first).cast<std::string>();
    if (!prev.contains(item.first))
      throw Error(WT_ERR_NOT_FOUND,
                  fmt::format("make_delta: tensor '{}' is in `after` but not in `before`", name));
    Held p = to_dlpack(prev[item.first], "tensor '{}' of `before`", name);
    Held c = to_dlpack(item.second, "tensor '{}' of `after`", name);
    auto delta = std::make_shared<Delta>();
    {
      py::gil_scoped_release r;
      *delta = make_delta(name, p.tensor(), c.tensor(), threads);
    }
    if (delta->count == 0) continue;
    SparsePatch patch;
    patch.name = name;
    patch.full_shape = delta->full_shape;
    patch.indices = owning(delta->indices.data(), DLDataType{kDLInt, 32, 1}, {delta->count},
                           [delta]() mutable { delta.reset(); });
    patch.values = owning(delta->values.data(), delta->dtype, {delta->count},
                          [delta]() mutable { delta.reset(); });
    out.append(py::cast(std::move(patch)));
  }
  return out;
}

}  // namespace

void bind_trainer(py::module_& m) {
  py::class_<SparsePatch>(m, "SparsePatch",
                          "One delta patch: the flat int32 indices (increasing) where a tensor "
                          "changed, the new values there, and the tensor's full shape.")
      .def(py::init([](std::string name, py::object indices, py::object values,
                       std::vector<int64_t> full_shape) {
             return SparsePatch{std::move(name), std::move(indices), std::move(values),
                                std::move(full_shape)};
           }),
           py::arg("name"), py::arg("indices"), py::arg("values"), py::arg("full_shape"))
      .def_readwrite("name", &SparsePatch::name)
      .def_readwrite("indices", &SparsePatch::indices)
      .def_readwrite("values", &SparsePatch::values)
      .def_readwrite("full_shape", &SparsePatch::full_shape)
      .def("__repr__", [](const SparsePatch& p) {
        return fmt::format("SparsePatch('{}', {} changed, full_shape={})", p.name,
                           py::len(p.indices),
                           py::repr(py::cast(p.full_shape)).cast<std::string>());
      });

  py::class_<PinnedSource>(m, "PinnedSource",
                           "Tensors exported once and iterated each round without Python: for "
                           "weights updated in place (an nn.Module, a dict, or pairs).")
      .def(py::init<py::object>(), py::arg("source"))
      .def("__len__", [](PinnedSource& s) { return s.metadata().size(); });

  py::class_<PyTrainer>(m, "TrainerEngine", "A trainer-side engine; made by wt.trainer_init.")
      .def(py::init<py::object, py::object, py::object, py::object, py::object>(),
           py::arg("init_info"), py::arg("client"), py::arg("source") = py::none(),
           py::arg("metadata") = py::none(), py::arg("group") = py::none())
      .def("send_weights", &PyTrainer::send_weights, py::arg("weight_version") = py::none(),
           py::arg("patches") = py::none(), py::arg("stream") = py::none(),
           "One round. `stream`: the CUDA stream that produced the weights (a torch.cuda.Stream "
           "or a cudaStream_t as an int); None: the current stream where torch has CUDA "
           "initialised.")
      .def("abort", &PyTrainer::abort)
      .def("close", &PyTrainer::close)
      .def_property_readonly("backend", &PyTrainer::backend)
      .def_property_readonly("streams_source", &PyTrainer::streams_source,
                             "Whether each tensor of a callable source is let go as soon as the "
                             "engine moved past it (plugins with WT_CAP_STREAMING_SOURCE).");

  m.def("make_delta", &make_delta_py, py::arg("before"), py::arg("after"), py::arg("threads") = 0,
        "Patches for every tensor of `after` whose bits differ from `before` (dicts name -> "
        "tensor, host memory, same dtype and shape).");
}

}  // namespace wt::python
