#include <wt/delta.hpp>

#include <wt/dtype.hpp>
#include <wt/error.hpp>

#include "element_loops.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace wt {

namespace {

bool compact(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expected = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

// Indices in [begin, end) whose elements of `size` bytes differ, appended in order.
// Blocks of 64 bytes that compare equal (most of them, for a training step's ~1 %) are skipped
// with one memcmp; only differing blocks are looked at element by element.
template <typename Word>
void differing(const unsigned char* a, const unsigned char* b, int64_t begin, int64_t end,
               std::vector<int32_t>& out) {
  constexpr int64_t kBlock = 64 / static_cast<int64_t>(sizeof(Word));
  int64_t i = begin;
  while (i < end) {
    const int64_t stop = std::min(end, i + kBlock);
    if (stop - i == kBlock && std::memcmp(a + i * sizeof(Word), b + i * sizeof(Word), 64) == 0) {
      i = stop;
      continue;
    }
    for (; i < stop; ++i) {
      Word x, y;
      std::memcpy(&x, a + i * sizeof(Word), sizeof(Word));
      std::memcpy(&y, b + i * sizeof(Word), sizeof(Word));
      if (x != y) out.push_back(static_cast<int32_t>(i));
    }
  }
}

void differing_bytes(const unsigned char* a, const unsigned char* b, std::size_t size,
                     int64_t begin, int64_t end, std::vector<int32_t>& out) {
  for (int64_t i = begin; i < end; ++i)
    if (std::memcmp(a + i * size, b + i * size, size) != 0) out.push_back(static_cast<int32_t>(i));
}

// The elements at `indices`, one after another; the size is a constant, so each is one move.
template <std::size_t kSize>
void gather(const unsigned char* from, const std::vector<int32_t>& indices, unsigned char* out) {
  for (std::size_t i = 0; i < indices.size(); ++i)
    std::memcpy(out + i * kSize, from + static_cast<std::size_t>(indices[i]) * kSize, kSize);
}

}  // namespace

wt_sparse_patch Delta::patch() const {
  wt_sparse_patch p{};
  p.struct_size = sizeof p;
  p.abi_version = WT_ABI_VERSION;
  p.name = name.c_str();
  p.indices = DLTensor{const_cast<int32_t*>(indices.data()), {kDLCPU, 0}, 1, {kDLInt, 32, 1},
                       const_cast<int64_t*>(&count),         nullptr,     0};
  p.values = DLTensor{const_cast<unsigned char*>(values.data()),
                      {kDLCPU, 0},
                      1,
                      dtype,
                      const_cast<int64_t*>(&count),
                      nullptr,
                      0};
  p.full_ndim = static_cast<int32_t>(full_shape.size());
  p.full_shape = full_shape.data();
  return p;
}

Delta make_delta(const std::string& name, const DLTensor& previous, const DLTensor& current,
                 unsigned threads) {
  auto bad = [&](const std::string& why) {
    throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("delta of '{}': {}", name, why));
  };
  if (!(previous.dtype == current.dtype)) bad("the two versions differ in dtype");
  if (previous.ndim != current.ndim ||
      !std::equal(previous.shape, previous.shape + previous.ndim, current.shape))
    bad("the two versions differ in shape");
  for (const DLTensor* t : {&previous, &current}) {
    if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost)
      bad("both versions must be in host memory");
    if (!compact(*t)) bad("both versions must be contiguous");
  }
  int64_t n = 1;
  for (int32_t d = 0; d < current.ndim; ++d) {
    if (current.shape[d] < 0) bad("a negative dimension");
    if (current.shape[d] > 0 && n > INT32_MAX / current.shape[d])
      bad("more than 2^31 - 1 elements (int32 indices cannot address them)");
    n *= current.shape[d];
  }
  const std::size_t size = element_size(current.dtype);
  const auto* a = static_cast<const unsigned char*>(previous.data) + previous.byte_offset;
  const auto* b = static_cast<const unsigned char*>(current.data) + current.byte_offset;
  Delta d;
  d.name = name;
  d.dtype = current.dtype;
  d.full_shape.assign(current.shape, current.shape + current.ndim);
  // Ranges of at least 1 Mi elements per thread: smaller tensors are not worth a thread.
  unsigned t = threads ? threads : std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
  t = static_cast<unsigned>(std::clamp<int64_t>(n >> 20, 1, t));
  std::vector<std::vector<int32_t>> parts(t);
  auto scan = [&](unsigned k) {
    const int64_t begin = n * k / t, end = n * (k + 1) / t;
    switch (size) {
      case 1:
        differing<uint8_t>(a, b, begin, end, parts[k]);
        break;
      case 2:
        differing<uint16_t>(a, b, begin, end, parts[k]);
        break;
      case 4:
        differing<uint32_t>(a, b, begin, end, parts[k]);
        break;
      case 8:
        differing<uint64_t>(a, b, begin, end, parts[k]);
        break;
      default:
        differing_bytes(a, b, size, begin, end, parts[k]);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned k = 1; k < t; ++k) pool.emplace_back(scan, k);
  scan(0);
  for (auto& th : pool) th.join();
  std::size_t total = 0;
  for (const auto& p : parts) total += p.size();
  d.indices.reserve(total);
  for (const auto& p : parts) d.indices.insert(d.indices.end(), p.begin(), p.end());
  d.count = static_cast<int64_t>(total);
  d.values.resize(total * size);
  const bool fixed = detail::with_fixed_size(
      size, [&]<std::size_t kSize>() { gather<kSize>(b, d.indices, d.values.data()); });
  if (!fixed)
    for (std::size_t i = 0; i < total; ++i)
      std::memcpy(d.values.data() + i * size, b + static_cast<std::size_t>(d.indices[i]) * size,
                  size);
  return d;
}

}  // namespace wt
