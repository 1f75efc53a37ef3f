// What the trainer sends: metadata() declares every parameter, and each pass (begin/next/end)
// yields the tensors in the same order with the same names, dtypes and shapes. Tensors returned
// by next() must stay valid until end().
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/wt_plugin.h>
#include <wt/tensor.hpp>

#include <vector>

namespace wt {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const std::vector<ParamMeta>& metadata() = 0;
  virtual void begin() = 0;
  // Fills `out` and returns true, or returns false at the end of the pass.
  virtual bool next(wt_tensor& out) = 0;
  virtual void end() = 0;

  // A source that would rather free each tensor once the engine moved past it (a generator
  // gathering one full tensor at a time) returns true. trainer_init then tells a plugin that can
  // honour it (WT_CAP_STREAMING_SOURCE) and calls set_streaming(true): from then on a tensor from
  // next() need stay valid only until the next call to next() or end().
  virtual bool prefers_streaming() const { return false; }
  bool streaming() const { return streaming_; }
  void set_streaming(bool on);

  // The C view handed to plugins; valid as long as this object.
  const wt_weight_source* c_source();

 private:
  bool streaming_ = false;
  wt_weight_source c_{};
  std::vector<wt_param_meta> c_meta_;
};

}  // namespace wt
