// Delta patches from two versions of a tensor, for sparse backends: the flat indices where the
// bits differ (int32, increasing) and the new values there. In RL post-training ~1-3 % of the
// elements change per optimizer step, so the patch is 30-100x smaller than the tensor.
//
//   auto d = wt::make_delta("w", before, after);       // DLTensors of one dtype and shape
//   engine->send_weights({.patches = {d.patch()}});
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/wt_plugin.h>

#include <cstdint>
#include <string>
#include <vector>

namespace wt {

struct Delta {
  std::string name;
  DLDataType dtype{};
  std::vector<int64_t> full_shape;
  std::vector<int32_t> indices;       // increasing
  std::vector<unsigned char> values;  // indices.size() elements of dtype
  int64_t count = 0;                  // indices.size(), as the patch's shape

  // A view for send_weights; valid while this Delta lives and is not changed.
  wt_sparse_patch patch() const;
};

// Compares `previous` and `current` (host memory, compact, same dtype and shape, at most 2^31 - 1
// elements) bit by bit on `threads` threads (0: the hardware's, at most 8). Throws wt::Error
// (WT_ERR_INVALID_ARGUMENT) naming the tensor when they do not match.
Delta make_delta(const std::string& name, const DLTensor& previous, const DLTensor& current,
                 unsigned threads = 0);

}  // namespace wt
