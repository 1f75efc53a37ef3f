#include "patch_rules.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/errors.hpp>
#include <wt/sdk/parallel_for.hpp>
#include <wt/sdk/patch_scan.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_set>

namespace wt::sparse {

using sdk::fail;

namespace {

bool contiguous_1d(const DLTensor& t) {
  return t.ndim == 1 && (t.strides == nullptr || t.shape[0] <= 1 || t.strides[0] == 1);
}

}  // namespace

int64_t full_elements(const int64_t* shape, int32_t ndim) {
  int64_t n = 1;
  for (int32_t d = 0; d < ndim; ++d) {
    if (shape[d] <= 0 || shape[d] > INT32_MAX / n) return -1;
    n *= shape[d];
  }
  return n;
}

namespace {

// One patch's form (everything but its elements: name, full_shape, dtypes, lengths, memory),
// read once into `c`. `names` holds the round's names so far; `cuda_device` is the round's memory
// (set by the first patch). Returns the parameter's elements, the bound of its indices.
int64_t check_patch_form(const wt_sparse_patch& p, std::size_t k, CheckedPatch& c,
                         std::unordered_set<std::string_view>& names, int& cuda_device) {
  if (p.name == nullptr || *p.name == '\0')
    fail(WT_ERR_INVALID_ARGUMENT, "sparse patch {} has no name", k);
  c.name = p.name;
  const std::string& name = c.name;
  if (!names.insert(name).second)
    fail(WT_ERR_INVALID_ARGUMENT,
         "sparse patch '{}' appears twice in one round: merge its indices into one patch", name);
  if (p.full_ndim < 0 || (p.full_ndim > 0 && p.full_shape == nullptr))
    fail(WT_ERR_INVALID_ARGUMENT, "Sparse patch requires full_shape: {}", name);
  c.full_shape.assign(p.full_shape, p.full_shape + p.full_ndim);
  const int64_t limit = full_elements(c.full_shape.data(), p.full_ndim);
  if (limit < 0)
    fail(WT_ERR_INVALID_ARGUMENT,
         "sparse patch '{}': full_shape needs positive dimensions and at most 2^31 - 1 elements "
         "(int32 indices address them)",
         name);
  const DLTensor idx = p.indices;
  const DLTensor val = p.values;
  if (!(idx.dtype.code == kDLInt && idx.dtype.bits == 32 && idx.dtype.lanes == 1))
    fail(WT_ERR_INVALID_ARGUMENT, "Sparse weight updates require int32 indices: {}", name);
  if (idx.ndim != 1 || val.ndim != 1)
    fail(WT_ERR_INVALID_ARGUMENT, "Sparse weight patches must be 1D flattened updates: {}", name);
  c.count = idx.shape[0];
  if (c.count < 0 || val.shape[0] != c.count)
    fail(WT_ERR_INVALID_ARGUMENT, "`indices` and `values` must have matching lengths for {}", name);
  if (!contiguous_1d(idx) || !contiguous_1d(val))
    fail(WT_ERR_INVALID_ARGUMENT, "sparse patch '{}': indices and values must be contiguous", name);
  // More indices than elements hold one twice; refused before anything is sized by the count.
  if (c.count > limit)
    fail(WT_ERR_INVALID_ARGUMENT, "sparse patch '{}': {} indices for a full_shape of {} elements",
         name, c.count, limit);
  c.dtype = val.dtype;
  if (!is_known_dtype(c.dtype) || element_size(c.dtype) == 0)
    fail(WT_ERR_INVALID_ARGUMENT,
         "sparse patch '{}': values of dtype (code {}, {} bits, {} lanes) cannot be sent (not a "
         "dtype the update info can name)",
         name, c.dtype.code, c.dtype.bits, c.dtype.lanes);
  if (idx.device.device_type != val.device.device_type ||
      idx.device.device_id != val.device.device_id)
    fail(WT_ERR_INVALID_ARGUMENT,
         "sparse patch '{}': indices and values must be in the same memory", name);
  const bool cuda = idx.device.device_type == kDLCUDA;
  if (!cuda && idx.device.device_type != kDLCPU && idx.device.device_type != kDLCUDAHost)
    fail(WT_ERR_INVALID_ARGUMENT, "sparse patch '{}': memory of device type {} is unsupported",
         name, static_cast<int>(idx.device.device_type));
  const int device = cuda ? idx.device.device_id : -1;
  if (k == 0) cuda_device = device;
  if (device != cuda_device)
    fail(WT_ERR_INVALID_ARGUMENT,
         "sparse patch '{}' is in other memory than the round's first patch: all patches of a "
         "round must be in host memory, or all on one CUDA device",
         name);
  if (c.count > 0 && (idx.data == nullptr || val.data == nullptr))
    fail(WT_ERR_INVALID_ARGUMENT, "sparse patch '{}' has null data", name);
  if (c.count > 0) {
    c.indices = static_cast<const unsigned char*>(idx.data) + idx.byte_offset;
    c.values = static_cast<const unsigned char*>(val.data) + val.byte_offset;
  }
  return limit;
}

// What reading a patch's elements found, and where they were read.
struct Elements {
  const unsigned char* indices;
  const unsigned char* values;
  int64_t limit;  // elements of full_shape
  IndexScan scan{};
  std::size_t nan_at = 0;
};

// The first rule a patch's elements break, thrown naming the patch: an index out of range, one
// given twice, a NaN value. `sorted` is scratch space reused across patches.
void judge_elements(const Elements& e, const CheckedPatch& c, std::vector<int32_t>& sorted) {
  const auto n = static_cast<std::size_t>(c.count);
  if (e.scan.out_of_range < n) {
    int32_t v;
    std::memcpy(&v, e.indices + 4 * e.scan.out_of_range, 4);
    fail(WT_ERR_INVALID_ARGUMENT,
         "sparse patch '{}': index {} (at position {}) is outside [0, {}) of full_shape", c.name, v,
         e.scan.out_of_range, e.limit);
  }
  // Duplicates: none when the indices are increasing (as a delta produces them), else looked for
  // in a sorted copy.
  if (!e.scan.increasing) {
    sorted.resize(n);
    std::memcpy(sorted.data(), e.indices, 4 * n);
    std::sort(sorted.begin(), sorted.end());
    if (auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end())
      fail(WT_ERR_INVALID_ARGUMENT, "sparse patch '{}': index {} appears more than once", c.name,
           *d);
  }
  if (e.nan_at < n)
    fail(WT_ERR_INVALID_ARGUMENT, "sparse patch '{}': values hold NaN (at position {})", c.name,
         e.nan_at);
}

// Sizes the packed round for these patches and zeroes the alignment gaps between their values,
// the only bytes no copy writes.
void prepare_pack(const std::vector<CheckedPatch>& patches, PackedRound& pack) {
  std::vector<int64_t> counts;
  std::vector<std::size_t> sizes;
  for (const auto& c : patches) {
    counts.push_back(c.count);
    sizes.push_back(element_size(c.dtype));
  }
  unsigned char* out = pack.prepare(packed_round_layout(counts, sizes));
  const auto& layout = pack.layout();
  uint64_t end = counts.empty() ? 0 : layout.indices_at.back() + 4 * counts.back();
  for (std::size_t k = 0; k < counts.size(); ++k) {
    if (layout.values_at[k] > end) std::memset(out + end, 0, layout.values_at[k] - end);
    end = layout.values_at[k] + sizes[k] * static_cast<uint64_t>(counts[k]);
  }
}

}  // namespace

CheckedRound check_round(std::span<const wt_sparse_patch> patches, ReadDevice read_device,
                         unsigned threads, PackedRound* pack) {
  CheckedRound round;
  round.patches.resize(patches.size());
  std::vector<Elements> elements(patches.size());
  std::unordered_set<std::string_view> names;
  uint64_t total_bytes = 0;
  for (std::size_t k = 0; k < patches.size(); ++k) {
    CheckedPatch& c = round.patches[k];
    const int64_t limit = check_patch_form(patches[k], k, c, names, round.cuda_device);
    elements[k] = {static_cast<const unsigned char*>(c.indices),
                   static_cast<const unsigned char*>(c.values), limit};
    // At most 2^31 - 1 elements of at most 4 + 8 * 65535 bytes each: no overflow.
    total_bytes += (4 + element_size(c.dtype)) * static_cast<uint64_t>(c.count);
  }

  // The elements: in place, in a packed copy, or (CUDA) in host copies made one patch at a time.
  std::vector<unsigned char> indices_copy, values_copy;
  auto read = [&](std::size_t k) {
    Elements& e = elements[k];
    const CheckedPatch& c = round.patches[k];
    const auto n = static_cast<std::size_t>(c.count);
    const std::size_t value_bytes = element_size(c.dtype) * n;
    if (n == 0) {
      e.scan = {0, true};
      return;
    }
    if (round.cuda_device >= 0) {
      indices_copy.resize(4 * n);
      values_copy.resize(value_bytes);
      read_device(round.cuda_device, indices_copy.data(), e.indices, 4 * n);
      read_device(round.cuda_device, values_copy.data(), e.values, value_bytes);
      e.indices = indices_copy.data();
      e.values = values_copy.data();
    } else if (round.packed) {
      unsigned char* at = pack->data();
      std::memcpy(at + pack->layout().indices_at[k], e.indices, 4 * n);
      std::memcpy(at + pack->layout().values_at[k], e.values, value_bytes);
      e.indices = at + pack->layout().indices_at[k];
      e.values = at + pack->layout().values_at[k];
    }
    e.scan = scan_indices(e.indices, n, e.limit);
    e.nan_at = first_nan(e.values, n, c.dtype);
  };
  // Reported in patch order, the first rule broken.
  std::vector<int32_t> sorted;
  auto judge = [&](std::size_t k) { judge_elements(elements[k], round.patches[k], sorted); };

  if (round.cuda_device >= 0) {  // one patch at a time, through the reused host copies
    for (std::size_t k = 0; k < patches.size(); ++k) {
      read(k);
      judge(k);
    }
    return round;
  }
  if (pack != nullptr) {
    prepare_pack(round.patches, *pack);
    round.packed = true;
  }
  // Small rounds are not worth a thread.
  constexpr uint64_t kParallelBytes = uint64_t{1} << 20;
  parallel_for(patches.size(), total_bytes < kParallelBytes ? 1 : threads, read);
  for (std::size_t k = 0; k < patches.size(); ++k) judge(k);
  return round;
}

}  // namespace wt::sparse
