// Delta patches as the reference receiver applies them: the whole batch is checked first (dtype,
// shapes, full_shape against the current tensor, every index in range and none twice), so a bad
// patch changes nothing; then each patch scatters its values into the tensor.
#pragma once

#include <wt/wt_plugin.h>
#include <wt/sdk/patch_scan.hpp>

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

// A batch is checked in two steps: its form, then its indices. A receiver copies the elements in
// between and checks the copies, so that what it applies is exactly what was checked.
//
// The form: everything but the elements (name known, memory, dtypes, 1-D compact, lengths,
// full_shape equal to the parameter's). Throws wt::Error (WT_ERR_INVALID_ARGUMENT, or
// WT_ERR_NOT_FOUND for an unknown name) naming the patch and what is wrong. `target` returns null
// for a name the receiver does not hold. Returns, per patch, its parameter's element count: the
// limit its indices are scanned against (scan_indices, <wt/sdk/patch_scan.hpp>).
std::vector<int64_t> check_patch_forms(
    std::span<const wt_sparse_patch> patches,
    const std::function<const PatchTarget*(const std::string&)>& target);

// The indices, given each patch's scan: the first one out of range, in patch order, else an index
// given twice for one parameter (in one patch or across the batch) is refused, naming the patch.
void judge_patch_indices(std::span<const wt_sparse_patch> patches, std::span<const IndexScan> scans,
                         std::span<const int64_t> limits);

// Writes a validated patch's values at its indices into `dst`, the tensor's bytes.
void apply_patch(const wt_sparse_patch& patch, unsigned char* dst);

}  // namespace wt::detail
