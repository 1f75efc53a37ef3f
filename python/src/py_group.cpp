#include "py_group.hpp"

#include <fmt/format.h>
#include <pybind11/stl.h>

namespace wt::python {

PyTrainerGroup::PyTrainerGroup(py::object group, CallbackFailures& failures)
    : group_(std::move(group)), failures_(failures) {
  for (const char* method : {"rank", "size", "all_gather", "barrier"})
    if (!py::hasattr(group_, method))
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("group: {} has no {}() (a trainer group has rank(), size(), "
                              "all_gather(bytes) and barrier(); or pass a torch.distributed "
                              "process group)",
                              py::repr(group_).cast<std::string>(), method));
  try {
    rank_ = group_.attr("rank")().cast<int>();
    size_ = group_.attr("size")().cast<int>();
  } catch (py::error_already_set& e) {
    failures_.rethrow(e, WT_ERR_INVALID_ARGUMENT, "group: rank() and size()");
  } catch (const py::cast_error&) {
    throw Error(WT_ERR_INVALID_ARGUMENT, "group: rank() and size() must return integers");
  }
  if (size_ < 1 || rank_ < 0 || rank_ >= size_)
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("group: rank {} of a group of {}: not a rank of it", rank_, size_));
}

PyTrainerGroup::~PyTrainerGroup() {
  py::gil_scoped_acquire g;
  group_ = py::object();
}

std::vector<std::string> PyTrainerGroup::all_gather(std::string_view mine) {
  py::gil_scoped_acquire g;
  std::vector<std::string> out;
  try {
    py::object got = group_.attr("all_gather")(py::bytes(mine.data(), mine.size()));
    for (py::handle h : got) out.push_back(h.cast<std::string>());
  } catch (py::error_already_set& e) {
    failures_.rethrow(e, WT_ERR_REMOTE, "the trainer group's all_gather");
  } catch (const py::cast_error&) {
    throw Error(WT_ERR_REMOTE,
                "the trainer group's all_gather returned something other than a "
                "list of bytes");
  }
  if (out.size() != static_cast<std::size_t>(size_))
    throw Error(WT_ERR_REMOTE,
                fmt::format("the trainer group's all_gather returned {} items for a group of {}",
                            out.size(), size_));
  return out;
}

void PyTrainerGroup::barrier() {
  py::gil_scoped_acquire g;
  try {
    group_.attr("barrier")();
  } catch (py::error_already_set& e) {
    failures_.rethrow(e, WT_ERR_REMOTE, "the trainer group's barrier");
  }
}

}  // namespace wt::python
