// A WeightSource over what a PyTorch training loop has: an nn.Module (its named_parameters()), a
// dict name -> tensor, an iterable of (name, tensor) pairs, or a callable returning one of those
// each round (a generator is consumed lazily, tensor by tensor).
//
// The metadata is read once, at trainer_init: from the object itself, or, for a callable, from
// `metadata` (pairs or a dict of tensors, or (name, dtype, shape) triples) or else from one call.
// Every pass then checks against it (libwt's checked source): a pass that disagrees fails the
// round naming the tensor. The GIL is taken once per tensor, only to fetch it; tensors stay
// referenced until the pass ends (the engine may read them until then).
#pragma once

#include "dlpack_bridge.hpp"
#include "py_errors.hpp"

#include <wt/weight_source.hpp>

#include <deque>
#include <string>
#include <vector>

namespace wt::python {

// A source's value: a tensor, or a wt.Shard (what this trainer rank holds of a parameter: its
// local slice at `offset` along `dim` of a tensor of `full_shape`; dim -1: a plain tensor).
struct ShardOf {
  py::object tensor;
  int dim = -1;
  int64_t offset = 0;
  std::vector<int64_t> full_shape;
};
ShardOf shard_of(py::object value, const std::string& name);  // GIL held

class PySource final : public WeightSource {
 public:
  struct Export {
    py::object obj, dtype, size, stride;  // as read when exported, compared the next round
    const void* data = nullptr;
    std::vector<int64_t> shape, strides;
    Held held;
    DLTensor view{};
  };
  // GIL held.
  PySource(py::object source, py::object metadata, CallbackFailures& failures);
  ~PySource() override;

  const std::vector<ParamMeta>& metadata() override { return meta_; }
  // A callable's tensors (a generator gathering one at a time) are let go as the engine moves on,
  // where the plugin allows it: one gathered tensor alive at a time.
  bool prefers_streaming() const override { return kind_ == Kind::kCallable; }
  void begin() override;
  bool next(wt_tensor& out) override;
  void end() override;

 private:
  enum class Kind { kModule, kMapping, kIterable, kCallable };
  py::object fresh_iterator();  // GIL held
  bool fetch(wt_tensor& out);   // the iterator's next tensor, exported and kept (GIL held)
  void export_pass();           // every tensor of the pass, fetched (takes the GIL)
  DLTensor cached_export(std::size_t index, py::handle tensor, std::string_view name);
  void release_pass();  // GIL held

  py::object source_;
  Kind kind_;
  CallbackFailures& failures_;
  std::vector<ParamMeta> meta_;
  // The pass in progress: its iterator, the tensors handed out, their names.
  py::object iter_;
  std::vector<Held> held_;
  std::vector<py::object> names_;  // the str objects: out.name points into them
  bool prefetched_ = false;        // the whole pass exported at once, at the first next()
  bool exported_ = false;
  // Torch tensors of a prefetched pass, by position, kept from round to round: exporting costs
  // more than checking that a tensor is still what it was (the same object, dtype, memory,
  // shape and strides), which an optimizer's in-place step keeps. Held until replaced or the
  // source goes.
  std::vector<Export> cache_;
  std::vector<wt_tensor> ready_;
  std::size_t served_ = 0;
};

// (name, tensor) pairs from a mapping or an iterable; `what` names the argument in errors.
std::vector<ParamMeta> metadata_of(py::handle items, const std::string& what);

}  // namespace wt::python

namespace wt::python {

// wt.PinnedSource: tensors exported once, at creation, and iterated without Python each round:
// for weights whose memory stays put between rounds (an optimizer updates parameters in place).
// A parameter replaced by a new tensor is not seen: use a live source for that.
class PinnedSource final : public WeightSource {
 public:
  explicit PinnedSource(py::object pairs);  // GIL held
  ~PinnedSource() override;

  const std::vector<ParamMeta>& metadata() override { return meta_; }
  // Re-exports a torch tensor whose memory moved since it was exported (`p.data = ...`), with
  // the GIL, one data_ptr() call per tensor; one that changed dtype or shape is refused.
  void begin() override;
  bool next(wt_tensor& out) override;
  void end() override {}

 private:
  std::vector<ParamMeta> meta_;
  std::vector<py::object> objects_;  // the tensors as given: a Parameter's .data may be replaced
  std::vector<Held> held_;
  std::size_t next_ = 0;
};

}  // namespace wt::python
