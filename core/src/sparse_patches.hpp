// Delta patches as the reference receiver applies them: the whole batch is checked first (dtype,
// shapes, full_shape against the current tensor, every index in range and none twice), so a bad
// patch changes nothing; then each patch scatters its values into a copy of the tensor.
#pragma once

#include <wt/wt_plugin.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace wt::detail {

// What a patch is checked against: the tensor it patches, as the receiver holds it now.
struct PatchTarget {
  DLDataType dtype{};
  std::vector<int64_t> shape;
};

// Throws wt::Error (WT_ERR_INVALID_ARGUMENT, or WT_ERR_NOT_FOUND for an unknown name) naming the
// patch and what is wrong. `target` returns null for a name the receiver does not hold.
void validate_patches(std::span<const wt_sparse_patch> patches,
                      const std::function<const PatchTarget*(const std::string&)>& target);

// Writes a validated patch's values at its indices into `dst`, the tensor's bytes.
void apply_patch(const wt_sparse_patch& patch, unsigned char* dst);

}  // namespace wt::detail
