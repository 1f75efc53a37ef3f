#include "compiled_copies.hpp"

#include "../common/device_bytes.hpp"

#include <wt/sdk/parallel_copy.hpp>

#include <algorithm>
#include <cstring>

namespace wt::m2n {

CompiledCopy compile_copy(uint32_t param, const std::vector<int64_t>& strides,
                          const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
                          std::size_t elem, CopyWalks& walks) {
  CompiledCopy c;
  c.param = param;
  int64_t first = 0;
  for (std::size_t d = 0; d < lo.size(); ++d) first += lo[d] * strides[d];
  c.tensor_at = static_cast<uint64_t>(first) * elem;
  c.run = elem;
  c.runs = 1;
  c.walk_at = static_cast<uint32_t>(walks.dims.size());
  for (std::size_t d = 0; d < lo.size(); ++d)
    if (hi[d] <= lo[d]) {
      c.runs = 0;  // an empty box moves nothing
      return c;
    }
  // From the innermost dimension out: a dimension whose elements lie one run apart extends the
  // run while nothing is walked yet; every other dimension (of extent above 1) is walked.
  std::vector<CopyWalks::Dim> outer;  // innermost first
  for (std::size_t d = lo.size(); d-- > 0;) {
    const int64_t extent = hi[d] - lo[d];
    if (extent == 1) continue;
    const int64_t pitch = strides[d] * static_cast<int64_t>(elem);
    if (outer.empty() && pitch == static_cast<int64_t>(c.run)) {
      c.run *= static_cast<uint64_t>(extent);
      continue;
    }
    outer.push_back({extent, pitch});
    c.runs *= static_cast<uint64_t>(extent);
  }
  std::reverse(outer.begin(), outer.end());  // outermost first
  c.walk_dims = static_cast<uint32_t>(outer.size());
  if (outer.empty()) return c;
  auto [it, fresh] = walks.known.try_emplace(outer, static_cast<uint32_t>(walks.dims.size()));
  if (fresh) walks.dims.insert(walks.dims.end(), outer.begin(), outer.end());
  c.walk_at = it->second;
  return c;
}

namespace {

// The tensor-side byte offset (from the box's first byte) of run k.
int64_t run_offset(const CompiledCopy& c, const CopyWalks::Dim* walk, uint64_t k) {
  int64_t off = 0;
  for (uint32_t d = c.walk_dims; d-- > 0;) {
    const auto count = static_cast<uint64_t>(walk[d].count);
    off += static_cast<int64_t>(k % count) * walk[d].pitch;
    k /= count;
  }
  return off;
}

// Moves bytes [from, to) of one copy's buffer side (0 <= from < to <= c.bytes()), run by run,
// calling move(tensor_byte, buffer_byte, n) for each run or part of one.
template <typename Move>
void walk_copy(const CompiledCopy& c, const CopyWalks::Dim* walk, unsigned char* tensor,
               unsigned char* buffer, uint64_t from, uint64_t to, Move&& move) {
  unsigned char* const box = tensor + c.tensor_at;
  unsigned char* const buf = buffer;
  uint64_t k = from / c.run, at = from;
  // The odometer of run k, advanced run by run instead of divided out again.
  int64_t digits[16] = {};
  const bool odometer = c.walk_dims <= 16;
  int64_t off = 0;
  if (odometer) {
    uint64_t rest = k;
    for (uint32_t d = c.walk_dims; d-- > 0;) {
      const auto count = static_cast<uint64_t>(walk[d].count);
      digits[d] = static_cast<int64_t>(rest % count);
      rest /= count;
      off += digits[d] * walk[d].pitch;
    }
  }
  while (at < to) {
    if (!odometer) off = run_offset(c, walk, k);
    const uint64_t in_run = at - k * c.run;
    const uint64_t n = std::min(c.run - in_run, to - at);
    move(box + off + static_cast<int64_t>(in_run), buf + at, n);
    at += n;
    ++k;
    if (odometer)
      for (uint32_t d = c.walk_dims; d-- > 0;) {
        off += walk[d].pitch;
        if (++digits[d] < walk[d].count) break;
        off -= walk[d].pitch * walk[d].count;
        digits[d] = 0;
      }
  }
}

// Calls each(copy, its first buffer byte, from, to) for the parts of the batch's copies within
// bytes [begin, end) of the batch seen as one stream (items in order, each item's copies in order,
// back to back in its buffer).
template <typename Each>
void for_range(std::span<const CopyBatchItem> batch, uint64_t begin, uint64_t end, Each&& each) {
  uint64_t pos = 0;
  for (const CopyBatchItem& item : batch) {
    unsigned char* buffer = item.buffer;
    for (const CompiledCopy& c : item.copies) {
      const uint64_t n = c.bytes();
      const uint64_t lo = std::max(begin, pos), hi = std::min(end, pos + n);
      if (lo < hi) each(c, buffer, lo - pos, hi - pos);
      pos += n;
      buffer += n;
      if (pos >= end) return;
    }
  }
}

}  // namespace

void execute_copies(std::span<const CopyBatchItem> batch, const CopyWalks& walks,
                    std::span<unsigned char* const> tensors, CopyDirection direction,
                    unsigned threads) {
  uint64_t total = 0;
  for (const CopyBatchItem& item : batch)
    for (const CompiledCopy& c : item.copies) total += c.bytes();
  const bool pack = direction == CopyDirection::kPack;
  detail::split_range(total, threads, [&](std::size_t begin, std::size_t end) {
    for_range(batch, begin, end,
              [&](const CompiledCopy& c, unsigned char* buffer, uint64_t from, uint64_t to) {
                walk_copy(c, walks.dims.data() + c.walk_at, tensors[c.param], buffer, from, to,
                          [pack](unsigned char* t, unsigned char* b, uint64_t n) {
                            if (pack)
                              std::memcpy(b, t, n);
                            else
                              std::memcpy(t, b, n);
                          });
              });
  });
}

void execute_copies_async(std::span<const CopyBatchItem> batch, const CopyWalks& walks,
                          std::span<unsigned char* const> tensors, CopyDirection direction,
                          int device, void* stream) {
  const bool pack = direction == CopyDirection::kPack;
  for (const CopyBatchItem& item : batch) {
    unsigned char* buffer = item.buffer;
    for (const CompiledCopy& c : item.copies) {
      walk_copy(c, walks.dims.data() + c.walk_at, tensors[c.param], buffer, 0, c.bytes(),
                [&](unsigned char* t, unsigned char* b, uint64_t n) {
                  if (pack)
                    plugins::copy_async(device, b, t, n, stream);
                  else
                    plugins::copy_async(device, t, b, n, stream);
                });
      buffer += c.bytes();
    }
  }
}

}  // namespace wt::m2n
