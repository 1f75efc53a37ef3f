// The trainer's check of a round of patches, all of it before any RPC or collective (reference
// §8.2, and more): a patch is a name, int32 flat indices (1-D, contiguous), values (1-D,
// contiguous, as many) and full_shape (positive dimensions, at most 2^31 - 1 elements, as int32
// indices can address); every index in [0, elements), none twice; floating values free of NaN;
// every patch of the round in one kind of memory. The error names the patch and the rule.
#pragma once

#include <wt/wt_plugin.h>

#include <cstdint>
#include <span>
#include <vector>

namespace wt::sparse {

// What a checked round's patches are in.
struct CheckedRound {
  int cuda_device = -1;  // -1: host memory
};

// Throws sdk::Error (WT_ERR_INVALID_ARGUMENT) naming the first patch that breaks a rule.
// `read_device(dst, src, n)` copies n bytes of CUDA memory to host (for CUDA patches).
CheckedRound check_round(std::span<const wt_sparse_patch> patches,
                         void (*read_device)(int device, void* dst, const void* src,
                                             std::size_t n));

// Elements of a full shape, or -1 when a dimension is not positive or they exceed 2^31 - 1.
int64_t full_elements(const int64_t* shape, int32_t ndim);

}  // namespace wt::sparse
