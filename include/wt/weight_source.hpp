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

  // The C view handed to plugins; valid as long as this object.
  const wt_weight_source* c_source();

 private:
  wt_weight_source c_{};
  std::vector<wt_param_meta> c_meta_;
};

}  // namespace wt
