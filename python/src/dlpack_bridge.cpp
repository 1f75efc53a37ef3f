#include "dlpack_bridge.hpp"

#include <wt/dtype.hpp>
#include <wt/error.hpp>

#include <fmt/format.h>

#include <atomic>
#include <memory>

namespace wt::python {

Held& Held::operator=(Held&& o) noexcept {
  if (this != &o) {
    Held gone(std::move(*this));
    m_ = o.m_;
    o.m_ = nullptr;
  }
  return *this;
}

Held::~Held() {
  if (m_ != nullptr && m_->deleter != nullptr) m_->deleter(m_);
}

Error invalid(const std::string& text) {
  return Error(WT_ERR_INVALID_ARGUMENT, text);
}

std::string type_name(py::handle obj) {
  return py::str(py::type::handle_of(obj).attr("__qualname__")).cast<std::string>();
}

namespace {

// The managed tensor behind a view or an owning export.
struct Export {
  DLManagedTensor managed{};
  std::vector<int64_t> shape;
  std::function<void()> release;  // called when the consumer lets the tensor go
};

void delete_export(DLManagedTensor* m) {
  std::unique_ptr<Export> e(static_cast<Export*>(m->manager_ctx));
  if (e->release) e->release();
}

// A capsule's destructor: only a capsule nobody consumed still owns its tensor.
void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (m != nullptr && m->deleter != nullptr) m->deleter(m);
}

py::object from_capsule(py::capsule cap) {
  // torch 1.13's from_dlpack takes a raw capsule; numpy wants an object with __dlpack__.
  // Looked up once and never released: a static py::object would be released after the
  // interpreter is gone.
  static py::object* torch_from = [] {
    try {
      return new py::object(py::module_::import("torch.utils.dlpack").attr("from_dlpack"));
    } catch (py::error_already_set&) {
      return new py::object(py::none());
    }
  }();
  if (!torch_from->is_none()) return (*torch_from)(cap);
  py::object holder = py::module_::import("wt._capsule").attr("CapsuleHolder")(cap);
  return py::module_::import("numpy").attr("from_dlpack")(holder);
}

py::object export_tensor(std::unique_ptr<Export> e) {
  e->managed.manager_ctx = e.get();
  e->managed.deleter = delete_export;
  e->managed.dl_tensor.shape = e->shape.data();
  if (e->managed.dl_tensor.strides != nullptr)
    e->managed.dl_tensor.strides = e->shape.data() + e->managed.dl_tensor.ndim;
  else
    e->managed.dl_tensor.ndim = static_cast<int32_t>(e->shape.size());
  DLManagedTensor* m = &e.release()->managed;
  PyObject* cap = PyCapsule_New(m, "dltensor", capsule_destructor);
  if (cap == nullptr) {
    delete_export(m);
    throw py::error_already_set();
  }
  return from_capsule(py::reinterpret_steal<py::capsule>(cap));
}

}  // namespace

namespace {

// torch.Tensor and torch._C._to_dlpack, once torch is imported (never released: module lifetime).
struct Torch {
  PyObject* tensor = nullptr;
  PyObject* to_dlpack = nullptr;
};

const Torch& torch_symbols() {
  static Torch t;
  if (t.tensor == nullptr || t.to_dlpack == nullptr) {  // looked up again until torch is there
    PyObject* torch = PyImport_GetModule(py::str("torch").ptr());
    if (torch != nullptr) {
      if (t.tensor == nullptr) t.tensor = PyObject_GetAttrString(torch, "Tensor");
      PyObject* c = PyObject_GetAttrString(torch, "_C");
      if (c != nullptr && t.to_dlpack == nullptr)
        t.to_dlpack = PyObject_GetAttrString(c, "_to_dlpack");
      Py_XDECREF(c);
      Py_DECREF(torch);
    }
    PyErr_Clear();
  }
  return t;
}

// A DLPack tensor carries no buffer size: its shape and strides are the exporter's word. Torch
// checks its own tensors against their storage; any other exporter's layout must at least keep
// within the elements its shape claims (no negative stride, no gap, nothing that overflows), so a
// capsule that lies about strides is refused before a byte is read instead of reading outside
// its buffer. `trusted`: torch's own exporter (strided views stay inside their storage).
void check_layout(const DLTensor& t, bool trusted, const std::function<std::string()>& what) {
  auto refuse = [&](const std::string& why) {
    return invalid(fmt::format("{} has an impossible DLPack layout: {}", what(), why));
  };
  if (t.ndim < 0 || t.ndim > 64) throw refuse(fmt::format("{} dimensions", t.ndim));
  if (t.ndim > 0 && t.shape == nullptr) throw refuse("no shape");
  if (t.dtype.lanes != 1 || t.dtype.bits == 0 || t.dtype.bits % 8 != 0)
    throw refuse(fmt::format("{}-bit elements in {} lanes", t.dtype.bits, t.dtype.lanes));
  const auto element = static_cast<int64_t>(t.dtype.bits / 8);
  int64_t count = 1;
  for (int32_t d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0) throw refuse(fmt::format("dimension {} has size {}", d, t.shape[d]));
    if (__builtin_mul_overflow(count, t.shape[d], &count))
      throw refuse("its element count overflows");
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(count, element, &bytes) || bytes > (int64_t{1} << 50))
    throw refuse(fmt::format("{} elements of {} bytes", count, element));
  if (t.byte_offset > (uint64_t{1} << 50))
    throw refuse(fmt::format("byte offset {}", t.byte_offset));
  if (count == 0) return;
  if (t.data == nullptr && t.byte_offset == 0) throw refuse("no data for its elements");
  if (t.strides == nullptr) return;
  int64_t span = 1;  // elements from the first to one past the last reachable
  for (int32_t d = 0; d < t.ndim; ++d) {
    if (t.shape[d] == 1) continue;  // a size-1 dimension's stride is never used
    if (t.strides[d] < 0)
      throw refuse(fmt::format("dimension {} has stride {} (negative strides are not read)", d,
                               t.strides[d]));
    int64_t reach = 0;
    if (__builtin_mul_overflow(t.shape[d] - 1, t.strides[d], &reach) ||
        __builtin_add_overflow(span, reach, &span))
      throw refuse(fmt::format("dimension {}'s stride {} overflows", d, t.strides[d]));
  }
  if (!trusted && span > count)
    throw refuse(fmt::format(
        "its strides span {} elements while its shape holds {}: wt cannot see that buffer's "
        "bounds; pass a contiguous copy",
        span, count));
}

}  // namespace

bool is_torch_tensor(py::handle obj) {
  const Torch& t = torch_symbols();
  return t.tensor != nullptr &&
         PyObject_TypeCheck(obj.ptr(), reinterpret_cast<PyTypeObject*>(t.tensor));
}

Held to_dlpack(py::handle obj, std::string_view pattern, std::string_view name) {
  auto what = [&] { return fmt::format(fmt::runtime(pattern), name); };
  py::object o = py::reinterpret_borrow<py::object>(obj);
  // torch tensors go straight to torch's C exporter: its Python __dlpack__ wrapper costs more
  // than the rest of a tensor's turn, and refuses parameters that require grad (the capsule
  // references the memory, not the autograd graph, so nothing is lost by exporting them).
  PyObject* torch_export = torch_symbols().to_dlpack;
  const bool from_torch = torch_export != nullptr && is_torch_tensor(o);
  if (from_torch) {
    PyObject* cap = PyObject_CallOneArg(torch_export, o.ptr());
    if (cap == nullptr) {
      py::error_already_set e;
      throw invalid(fmt::format("{} cannot be exported as DLPack: {}", what(), e.what()));
    }
    o = py::reinterpret_steal<py::object>(cap);
  } else if (!PyCapsule_CheckExact(o.ptr())) {
    if (py::hasattr(o, "requires_grad") && py::hasattr(o, "detach") &&
        py::bool_(o.attr("requires_grad")))
      o = o.attr("detach")();
    if (!py::hasattr(o, "__dlpack__"))
      throw invalid(
          fmt::format("{} is a {}, not a tensor: pass a torch.Tensor, a numpy array or "
                      "anything with __dlpack__",
                      what(), type_name(o)));
    try {
      o = o.attr("__dlpack__")();
    } catch (py::error_already_set& e) {
      throw invalid(fmt::format("{} cannot be exported as DLPack: {}", what(), e.what()));
    }
  }
  if (!PyCapsule_IsValid(o.ptr(), "dltensor"))
    throw invalid(
        fmt::format("{} is not an unused \"dltensor\" capsule (a capsule is consumed "
                    "once; DLPack 1.0 versioned capsules are not read by this build)",
                    what()));
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(o.ptr(), "dltensor"));
  if (PyCapsule_SetName(o.ptr(), "used_dltensor") != 0) throw py::error_already_set();
  Held held(m);  // released if refused
  check_layout(held.tensor(), from_torch, what);
  return held;
}

std::string describe(const DLTensor& t) {
  std::string shape;
  for (int i = 0; i < t.ndim; ++i) shape += (i ? "x" : "") + std::to_string(t.shape[i]);
  return fmt::format("{} {}", torch_name(t.dtype), t.ndim == 0 ? "scalar" : shape);
}

py::object view_of(const DLTensor& t, std::function<void()> released) {
  auto e = std::make_unique<Export>();
  e->release = std::move(released);
  e->managed.dl_tensor = t;
  // The shape, then the strides when given, in one vector (export_tensor points at the shape).
  e->shape.assign(t.shape, t.shape + t.ndim);
  if (t.strides != nullptr) e->shape.insert(e->shape.end(), t.strides, t.strides + t.ndim);
  return export_tensor(std::move(e));
}

void call_with_view(py::handle fn, const char* name, const DLTensor& t, std::string_view callback) {
  auto let_go = std::make_shared<std::atomic<bool>>(false);
  fn(py::str(name), view_of(t, [let_go] { *let_go = true; }));
  if (!*let_go)
    throw invalid(
        fmt::format("{}('{}') kept the tensor it was given (or a view of it) past the "
                    "call: its memory is wt's, reused after the round; copy it instead "
                    "(param.copy_(tensor), tensor.clone())",
                    callback, name));
}

py::object owning(void* data, DLDataType dtype, std::vector<int64_t> shape,
                  std::function<void()> release) {
  auto e = std::make_unique<Export>();
  e->managed.dl_tensor.data = data;
  e->managed.dl_tensor.device = {kDLCPU, 0};
  e->managed.dl_tensor.dtype = dtype;
  e->managed.dl_tensor.strides = nullptr;
  e->managed.dl_tensor.byte_offset = 0;
  e->shape = std::move(shape);
  e->release = std::move(release);
  return export_tensor(std::move(e));
}

DLDataType dtype_of(py::handle dtype, const std::string& what) {
  std::string name = py::str(dtype).cast<std::string>();
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  if (auto d = dtype_from_torch_name(name)) return *d;
  throw invalid(
      fmt::format("{}: dtype '{}' is not one wt moves (float32, float16, bfloat16, "
                  "float64, int8, int16, int32, int64, uint8)",
                  what, name));
}

}  // namespace wt::python
