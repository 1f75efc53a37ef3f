#include "py_source.hpp"

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
      auto [name, tensor] = pair_of(item, i, what);
      Held h = to_dlpack(tensor, pattern, name);
      meta.push_back(meta_of(name, h.tensor()));
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
  held_.clear();  // the GIL is held: a numpy deleter may touch Python objects
  names_.clear();
}

void PySource::begin() {
  py::gil_scoped_acquire g;
  release_pass();
  try {
    iter_ = py::iter(fresh_iterator());
  } catch (py::error_already_set& e) {
    failures_.rethrow(e, WT_ERR_INVALID_ARGUMENT, "the source raised while starting a pass");
  }
}

bool PySource::next(wt_tensor& out) {
  py::gil_scoped_acquire g;
  const std::size_t index = names_.size();
  if (streaming()) held_.clear();  // the engine is done with the previous tensor
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
  auto [name, tensor] = pair_of(item, index, "the source");
  names_.push_back(std::move(name));
  held_.push_back(to_dlpack(tensor, "tensor '{}' of the source", names_.back()));
  out.name = names_.back().c_str();
  out.tensor = held_.back().tensor();
  return true;
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
  }
}

PinnedSource::~PinnedSource() {
  py::gil_scoped_acquire g;
  held_.clear();
}

bool PinnedSource::next(wt_tensor& out) {
  if (next_ >= held_.size()) return false;
  out.name = meta_[next_].name.c_str();
  out.tensor = held_[next_].tensor();
  ++next_;
  return true;
}

}  // namespace wt::python
