// The trainer's check of a round of patches, all of it before any RPC or collective (reference
// §8.2, and more): a patch is a name, int32 flat indices (1-D, contiguous), values (1-D,
// contiguous, as many) and full_shape (positive dimensions, at most 2^31 - 1 elements, as int32
// indices can address); every index in [0, elements), none twice; floating values free of NaN;
// every patch of the round in one kind of memory. The error names the patch and the rule.
#pragma once

#include "packed_round.hpp"

#include <wt/wt_plugin.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace wt::sparse {

// A patch as it was checked: every field read once from the caller's memory, so that the update
// info, the wire layout and the broadcasts all agree with what was checked even if the caller
// changes its patch structs meanwhile.
struct CheckedPatch {
  std::string name;
  DLDataType dtype{};  // of the values
  std::vector<int64_t> full_shape;
  int64_t count = 0;              // indices, and values
  const void* indices = nullptr;  // the elements (data + byte_offset)
  const void* values = nullptr;
};

// What a checked round is.
struct CheckedRound {
  int cuda_device = -1;  // -1: host memory
  bool packed = false;   // the round was packed into the PackedRound given
  std::vector<CheckedPatch> patches;
};

// Copies `n` bytes of CUDA memory on `device` to host memory.
using ReadDevice = void (*)(int device, void* dst, const void* src, std::size_t n);

// Throws sdk::Error (WT_ERR_INVALID_ARGUMENT) naming the first patch that breaks a rule: first
// every patch's form (name, dtypes, shapes, memory), then, in patch order, its indices and values.
// The elements are read on up to `threads` threads (CUDA patches: on one, through read_device).
// With `pack`, a host round is first copied into it (packed_round.hpp) and the copy is what is
// read: the bytes that go on the wire are the bytes that were checked, whatever the caller does to
// its patches meanwhile.
CheckedRound check_round(std::span<const wt_sparse_patch> patches, ReadDevice read_device,
                         unsigned threads = 1, PackedRound* pack = nullptr);

// Elements of a full shape, or -1 when a dimension is not positive or they exceed 2^31 - 1.
int64_t full_elements(const int64_t* shape, int32_t ndim);

}  // namespace wt::sparse
