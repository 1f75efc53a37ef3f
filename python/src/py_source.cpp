#include "py_source.hpp"

#include "py_stream.hpp"

#include <wt/error.hpp>

#include <fmt/format.h>

namespace wt::python {

namespace {

// Unpacks one item of a source: a (name, tensor) pair.
std::pair<std::string, py::object> pair_of(py::handle item, std::size_t index,
                                           const std::string& what) {
  if (!py::isinstance<py::tuple>(item) && !py::isinstance<py::list>(item))
    throw invalid(fmt::format("item {} of {} is not a (name, tensor) pair", index, what));
  py::sequence seq = py::reinterpret_borrow<py::sequence>(item);
  if (seq.size() != 2 || !py::isinstance<py::str>(seq[0]))
    throw invalid(fmt::format("item {} of {} is not a (name, tensor) pair", index, what));
  return {seq[0].cast<std::string>(), py::reinterpret_borrow<py::object>(seq[1])};
}

ParamMeta meta_of(const std::string& name, const DLTensor& t) {
  return ParamMeta{name, t.dtype, std::vector<int64_t>(t.shape, t.shape + t.ndim)};
}

}  // namespace

ShardOf shard_of(py::object value, const std::string& name) {
  ShardOf s;
  if (is_torch_tensor(value) || !py::hasattr(value, "__wt_shard__")) {
    s.tensor = std::move(value);
    return s;
  }
  s.tensor = value.attr("local");
  s.dim = value.attr("dim").cast<int>();
  s.offset = value.attr("offset").cast<int64_t>();
  for (py::handle d : py::iter(value.attr("full_shape"))) s.full_shape.push_back(d.cast<int64_t>());
  if (s.dim < 0 || static_cast<std::size_t>(s.dim) >= s.full_shape.size())
    throw invalid(
        fmt::format("wt.Shard of tensor '{}': dim {} is not a dimension of its full "
                    "shape ({} dimension(s))",
                    name, s.dim, s.full_shape.size()));
  return s;
}

ParamMeta meta_of(const std::string& name, const DLTensor& t, const ShardOf& s) {
  ParamMeta m = meta_of(name, t);
  if (s.dim < 0) return m;
  if (static_cast<std::size_t>(t.ndim) != s.full_shape.size())
    throw invalid(
        fmt::format("wt.Shard of tensor '{}': the local tensor has {} dimension(s), its "
                    "full shape {}",
                    name, t.ndim, s.full_shape.size()));
  m.shard_dim = s.dim;
  m.shard_offset = s.offset;
  m.shard_length = t.shape[s.dim];
  m.shape = s.full_shape;  // the host checks the slice against it
  return m;
}

namespace {

py::object items_of(py::handle obj) {
  if (py::hasattr(obj, "items") && !py::isinstance<py::list>(obj)) return obj.attr("items")();
  return py::reinterpret_borrow<py::object>(obj);
}

}  // namespace

std::vector<ParamMeta> metadata_of(py::handle items, const std::string& what) {
  std::vector<ParamMeta> meta;
  const std::string pattern = "tensor '{}' of " + what;
  std::size_t i = 0;
  for (py::handle item : py::iter(items_of(items))) {
    py::sequence seq = py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item)
                           ? py::reinterpret_borrow<py::sequence>(item)
                           : py::sequence();
    if (seq && seq.size() == 3 && py::isinstance<py::str>(seq[0])) {  // (name, dtype, shape)
      const std::string name = seq[0].cast<std::string>();
      ParamMeta m{name, dtype_of(seq[1], fmt::format("{}, tensor '{}'", what, name)), {}};
      for (py::handle d : py::iter(seq[2])) m.shape.push_back(d.cast<int64_t>());
      meta.push_back(std::move(m));
    } else {
      auto [name, value] = pair_of(item, i, what);
      const ShardOf s = shard_of(value, name);
      Held h = to_dlpack(s.tensor, pattern, name);
      meta.push_back(meta_of(name, h.tensor(), s));
    }
    ++i;
  }
  return meta;
}

PySource::PySource(py::object source, py::object metadata, CallbackFailures& failures)
    : source_(std::move(source)), failures_(failures) {
  if (py::hasattr(source_, "named_parameters") && py::hasattr(source_, "state_dict"))
    kind_ = Kind::kModule;  // before callable: a Module is callable too
  else if (py::hasattr(source_, "items") && !py::isinstance<py::list>(source_))
    kind_ = Kind::kMapping;
  else if (PyCallable_Check(source_.ptr()))
    kind_ = Kind::kCallable;
  else if (py::hasattr(source_, "__iter__")) {
    kind_ = Kind::kIterable;
    // A one-shot iterator (a generator) is kept as a list: every round sends the same tensors.
    if (py::iter(source_).is(source_)) source_ = py::list(source_);
  } else {
    throw invalid(fmt::format(
        "source is a {}: pass an nn.Module, a dict name -> tensor, an iterable of (name, tensor) "
        "pairs, or a callable returning one",
        type_name(source_)));
  }
  if (!metadata.is_none())
    meta_ = metadata_of(metadata, "metadata");
  else
    meta_ = metadata_of(fresh_iterator(), "the source");  // a callable is called once for it
}

PySource::~PySource() {
  py::gil_scoped_acquire g;
  release_pass();
  cache_.clear();
  source_ = py::object();
}

py::object PySource::fresh_iterator() {
  switch (kind_) {
    case Kind::kModule:
      return source_.attr("named_parameters")();
    case Kind::kMapping:
      return source_.attr("items")();
    case Kind::kIterable:
      return source_;
    case Kind::kCallable:
      return items_of(source_());
  }
  return py::none();
}

void PySource::release_pass() {
  iter_ = py::object();
  ready_.clear();
  served_ = 0;
  held_.clear();  // the GIL is held: a numpy deleter may touch Python objects
  names_.clear();
}

void PySource::begin() {
  py::gil_scoped_acquire g;
  release_pass();
  held_.reserve(meta_.size());
  names_.reserve(meta_.size());
  try {
    iter_ = py::iter(fresh_iterator());
  } catch (py::error_already_set& e) {
    failures_.rethrow(e, WT_ERR_INVALID_ARGUMENT, "the source raised while starting a pass");
  }
  // A module's, a dict's or a list's tensors are all alive anyway: they are exported together,
  // under one GIL hold, at the first next() (engines call begin() before they start the round's
  // calls, next() once those run), and the pass is served without Python. A callable is
  // fetched lazily, tensor by tensor.
  prefetched_ = kind_ != Kind::kCallable;
  exported_ = false;
}

void PySource::export_pass() {
  py::gil_scoped_acquire g;
  ready_.reserve(meta_.size());
  wt_tensor t{};
  while (fetch(t)) ready_.push_back(t);
  if (cache_.size() > ready_.size()) cache_.resize(ready_.size());
  exported_ = true;
}

namespace {

// What the reuse check reads of a tensor, by interned name: building the attribute name afresh
// each time would cost as much as the read. Leaked on purpose: they live as long as the
// interpreter, and are only touched with the GIL held.
struct TensorAttributes {
  PyObject* dtype = PyUnicode_InternFromString("dtype");
  PyObject* data_ptr = PyUnicode_InternFromString("data_ptr");
  PyObject* size = PyUnicode_InternFromString("size");
  PyObject* stride = PyUnicode_InternFromString("stride");
};
const TensorAttributes& attributes() {
  static const TensorAttributes* a = new TensorAttributes;
  return *a;
}

py::object call_method(py::handle t, PyObject* name) {
  PyObject* r = PyObject_CallMethodNoArgs(t.ptr(), name);
  if (r == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(r);
}

bool equal(const py::object& a, const py::object& b) {
  int r = PyObject_RichCompareBool(a.ptr(), b.ptr(), Py_EQ);
  if (r < 0) throw py::error_already_set();
  return r == 1;
}

// The tensor is still what it was when exported: same dtype, memory, shape and strides (an
// optimizer's in-place update keeps them; `p.data = other` or a resize_ does not). Four reads
// and three comparisons done in C, about a quarter of a new export.
bool unchanged(const PySource::Export& e, py::handle t) {
  const TensorAttributes& a = attributes();
  PyObject* dtype = PyObject_GetAttr(t.ptr(), a.dtype);
  if (dtype == nullptr) throw py::error_already_set();
  Py_DECREF(dtype);  // still owned by the tensor; only its identity is compared
  if (dtype != e.dtype.ptr()) return false;
  if (PyLong_AsVoidPtr(call_method(t, a.data_ptr).ptr()) != e.data) return false;
  return equal(call_method(t, a.size), e.size) && equal(call_method(t, a.stride), e.stride);
}

}  // namespace

DLTensor PySource::cached_export(std::size_t index, py::handle tensor, std::string_view name) {
  if (cache_.size() <= index) cache_.resize(index + 1);
  Export& e = cache_[index];
  if (e.obj.ptr() == tensor.ptr() && unchanged(e, tensor)) return e.view;
  e.held = to_dlpack(tensor, "tensor '{}' of the source", name);
  const DLTensor& d = e.held.tensor();
  e.obj = py::reinterpret_borrow<py::object>(tensor);
  const TensorAttributes& a = attributes();
  e.dtype = py::reinterpret_steal<py::object>(PyObject_GetAttr(tensor.ptr(), a.dtype));
  if (!e.dtype) throw py::error_already_set();
  e.size = call_method(tensor, a.size);
  e.stride = call_method(tensor, a.stride);
  e.data = static_cast<char*>(d.data) + d.byte_offset;
  e.shape.assign(d.shape, d.shape + d.ndim);
  e.strides.assign(e.shape.size(), 1);
  if (d.strides != nullptr) {
    e.strides.assign(d.strides, d.strides + d.ndim);
  } else {  // row-major
    for (int i = d.ndim - 2; i >= 0; --i) e.strides[i] = e.strides[i + 1] * e.shape[i + 1];
  }
  e.view = d;  // pointing at the copies above, not into torch's tensor
  e.view.shape = e.shape.data();
  e.view.strides = e.strides.data();
  return e.view;
}

bool PySource::fetch(wt_tensor& out) {
  const std::size_t index = names_.size();
  py::object item;
  try {
    PyObject* raw = PyIter_Next(iter_.ptr());
    if (raw == nullptr) {
      if (PyErr_Occurred()) throw py::error_already_set();
      return false;
    }
    item = py::reinterpret_steal<py::object>(raw);
  } catch (py::error_already_set& e) {
    failures_.rethrow(e, WT_ERR_INVALID_ARGUMENT,
                      fmt::format("the source raised at item {}", index));
  }
  // The name is the str object's own UTF-8 (kept alive with it): no copy per tensor.
  PyObject* it = item.ptr();
  py::object name, tensor;
  if (PyTuple_CheckExact(it) && PyTuple_GET_SIZE(it) == 2 &&
      PyUnicode_Check(PyTuple_GET_ITEM(it, 0))) {  // what dict.items() and named_parameters() yield
    name = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(it, 0));
    tensor = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(it, 1));
  } else {
    auto [n, t] = pair_of(item, index, "the source");
    name = py::str(n);
    tensor = std::move(t);
  }
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(name.ptr(), &size);
  if (utf8 == nullptr) throw py::error_already_set();
  // A wt.Shard: the engine gets its local slice (the metadata carries where it sits).
  if (!is_torch_tensor(tensor))
    tensor = shard_of(std::move(tensor), std::string(utf8, size)).tensor;
  if (prefetched_ && is_torch_tensor(tensor)) {
    out.tensor = cached_export(index, tensor, std::string_view(utf8, size));
  } else {
    if (!prefetched_) order_after_producer(tensor);  // made just now, maybe still on its stream
    held_.push_back(to_dlpack(tensor, "tensor '{}' of the source", std::string_view(utf8, size)));
    out.tensor = held_.back().tensor();
  }
  names_.push_back(std::move(name));
  out.name = utf8;
  return true;
}

bool PySource::next(wt_tensor& out) {
  if (prefetched_) {  // every tensor exported at once: no Python here after the first
    if (!exported_) export_pass();
    if (served_ >= ready_.size()) return false;
    out = ready_[served_++];
    return true;
  }
  py::gil_scoped_acquire g;
  if (streaming()) held_.clear();  // the engine is done with the previous tensor
  return fetch(out);
}

void PySource::end() {
  py::gil_scoped_acquire g;
  release_pass();
}

}  // namespace wt::python

namespace wt::python {

PinnedSource::PinnedSource(py::object pairs) {
  py::object items = py::hasattr(pairs, "named_parameters") && py::hasattr(pairs, "state_dict")
                         ? pairs.attr("named_parameters")()
                         : (py::hasattr(pairs, "items") ? pairs.attr("items")() : pairs);
  std::size_t i = 0;
  for (py::handle item : py::iter(items)) {
    auto [name, tensor] = pair_of(item, i++, "the pinned source");
    held_.push_back(to_dlpack(tensor, "tensor '{}' of the pinned source", name));
    meta_.push_back(meta_of(name, held_.back().tensor()));
    objects_.push_back(py::reinterpret_borrow<py::object>(tensor));
  }
}

PinnedSource::~PinnedSource() {
  py::gil_scoped_acquire g;
  held_.clear();
  objects_.clear();
}

void PinnedSource::begin() {
  next_ = 0;
  py::gil_scoped_acquire g;
  for (std::size_t i = 0; i < objects_.size(); ++i) {
    const py::object& o = objects_[i];
    if (!is_torch_tensor(o)) continue;  // numpy and others: their memory does not move
    const DLTensor& was = held_[i].tensor();
    const auto at =
        reinterpret_cast<uintptr_t>(static_cast<const unsigned char*>(was.data) + was.byte_offset);
    if (o.attr("data_ptr")().cast<uintptr_t>() == at) continue;
    Held now = to_dlpack(o, "tensor '{}' of the pinned source", meta_[i].name);
    const ParamMeta m = meta_of(meta_[i].name, now.tensor());
    if (!(m.dtype == meta_[i].dtype) || m.shape != meta_[i].shape)
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("tensor '{}' of the pinned source was replaced by one of another "
                              "dtype or shape ({}); the engine's model is fixed at trainer_init: "
                              "create it again",
                              meta_[i].name, describe(now.tensor())));
    held_[i] = std::move(now);
  }
}

bool PinnedSource::next(wt_tensor& out) {
  if (next_ >= held_.size()) return false;
  out.name = meta_[next_].name.c_str();
  out.tensor = held_[next_].tensor();
  ++next_;
  return true;
}

}  // namespace wt::python
