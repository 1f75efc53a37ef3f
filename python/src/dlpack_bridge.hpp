// Tensors across the Python boundary as DLPack, without copies.
//
// In: anything with __dlpack__ (torch, numpy, ...), or a "dltensor" capsule. Torch 1.13 refuses
// to export a tensor that requires grad; such a parameter is detached first (a view of the same
// memory, not a copy). The capsule is consumed ("used_dltensor") and its managed tensor released
// when the Held goes, with the GIL held (numpy's deleter touches Python objects).
//
// Out: a view of memory wt owns for the duration of a call (a worker's load), or memory handed
// over for good (a delta's arrays), as a torch tensor when torch is importable, else numpy.
#pragma once

#include <wt/error.hpp>

#include <dlpack/dlpack.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace wt::python {

namespace py = pybind11;

// A consumed DLPack export; move-only. Destroy it with the GIL held.
class Held {
 public:
  Held() = default;
  explicit Held(DLManagedTensor* m) : m_(m) {}
  Held(Held&& o) noexcept : m_(o.m_) { o.m_ = nullptr; }
  Held& operator=(Held&& o) noexcept;
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  ~Held();
  const DLTensor& tensor() const { return m_->dl_tensor; }

 private:
  DLManagedTensor* m_ = nullptr;
};

// Exports `obj` as DLPack; errors name it as `pattern` with `name` in it ("tensor '{}' of the
// source"), formatted only when one is raised: this runs once per tensor per round.
Held to_dlpack(py::handle obj, std::string_view pattern, std::string_view name);

// A torch.Tensor (torch imported already).
bool is_torch_tensor(py::handle obj);

// WT_ERR_INVALID_ARGUMENT with this message; the qualified name of obj's type.
Error invalid(const std::string& text);
std::string type_name(py::handle obj);

// "bfloat16 4x8" for error messages.
std::string describe(const DLTensor& t);

// A tensor viewing `t` (not owned: valid while the caller keeps the memory). `released`, when
// given, runs when the consumer lets the view go (and every view it made of it), from any thread.
py::object view_of(const DLTensor& t, std::function<void()> released = {});

// Calls fn(name, view) with a view of `t` valid during the call only (a Python exception passes
// through). The memory is the caller's and is reused or unmapped after it: a callback that keeps
// the view (or a view of it) is refused at once, WT_ERR_INVALID_ARGUMENT naming `callback`
// ("load") and the tensor, before it can read stale bytes.
void call_with_view(py::handle fn, const char* name, const DLTensor& t, std::string_view callback);

// A tensor owning memory: `release` frees it when the tensor goes (any thread, without the GIL).
py::object owning(void* data, DLDataType dtype, std::vector<int64_t> shape,
                  std::function<void()> release);

// "cpu", "cuda" or "cuda:N"; else WT_ERR_INVALID_ARGUMENT naming the text (worker_binding.cpp).
DLDevice parse_device(const std::string& text);

// torch.dtype / numpy dtype / "bfloat16" -> DLDataType; throws InvalidArgument naming `what`.
DLDataType dtype_of(py::handle dtype, const std::string& what);

}  // namespace wt::python
