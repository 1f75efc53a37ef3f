// Delta patches as the reference receiver applies them: the whole batch is checked first (dtype,
// shapes, full_shape against the current tensor, every index in range and none twice), so a bad
// patch changes nothing; then each patch scatters its values into the tensor. Part of
// wt::receiver, for an engine that applies a delta backend's patches to tensors of its own (the
// Python package does, to PyTorch's) by exactly the receiver's rules.
#pragma once

#include <wt/wt_plugin.h>
#include <wt/sdk/patch_scan.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace wt::patching {

// What a patch is checked against: the tensor it patches, as the receiver holds it now.
struct PatchTarget {
  DLDataType dtype{};
  std::vector<int64_t> shape;
};

// A batch is checked in two steps: its form, then its indices. A receiver copies the elements in
// between and checks the copies, so that what it applies is exactly what was checked.
//
// A patch's form, read once from the backend's structs: what the rest of the check, the copy and
// the apply go by (the backend's structs may change under them).
struct PatchForm {
  std::string name;
  DLDataType dtype{};
  std::size_t element_size = 0;
  int64_t count = 0;                       // indices, and values
  int64_t limit = 0;                       // the parameter's elements: indices must be below
  const unsigned char* indices = nullptr;  // the backend's elements (data + byte_offset)
  const unsigned char* values = nullptr;
};

// Everything but the elements: name known, memory, dtypes, 1-D compact, lengths, full_shape equal
// to the parameter's, no more indices for a parameter (across the batch) than it has elements.
// Throws wt::Error (WT_ERR_INVALID_ARGUMENT, or WT_ERR_NOT_FOUND for an unknown name) naming the
// patch and what is wrong. `target` returns null for a name the receiver does not hold.
std::vector<PatchForm> check_patch_forms(
    std::span<const wt_sparse_patch> patches,
    const std::function<const PatchTarget*(const std::string&)>& target);

// The indices, given each patch's scan (scan_indices against its limit, <wt/sdk/patch_scan.hpp>)
// of the indices now at `indices[k]` (the receiver's copies): the first one out of range, in patch
// order, else an index given twice for one parameter (in one patch or across the batch) is
// refused, naming the patch.
void judge_patch_indices(std::span<const PatchForm> forms, std::span<const int32_t* const> indices,
                         std::span<const IndexScan> scans);

// Writes `count` values of `element_size` bytes at their (validated) indices into `dst`, the
// tensor's bytes.
void apply_patch(const int32_t* indices, const unsigned char* values, int64_t count,
                 std::size_t element_size, unsigned char* dst);

}  // namespace wt::patching
