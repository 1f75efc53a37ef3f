// vLLM's packed chunk boundaries (reference §6), which sender and worker compute alike: tensors in
// iteration order, back to back; a chunk closes right after the tensor that takes it past
// packed_buffer_size_bytes (strictly more), so that tensor stays in it; the last partial chunk is
// sent when not empty.
#pragma once

#include <wt/sdk/errors.hpp>

#include <dlpack/dlpack.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace wt::nccl {

// A packed chunk's element type on the wire: bytes (vLLM broadcasts packed buffers as uint8).
inline constexpr DLDataType kBytes{kDLUInt, 8, 1};

// [first, last) tensor indices of each chunk, and its byte count. Sizes come from the wire on the
// worker's side: a chunk whose byte count would wrap is refused.
struct Chunk {
  std::size_t first = 0, last = 0;
  uint64_t bytes = 0;
};

inline std::vector<Chunk> packed_chunks(const std::vector<uint64_t>& sizes, uint64_t buffer) {
  std::vector<Chunk> out;
  Chunk c;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > UINT64_MAX - c.bytes)
      sdk::fail(WT_ERR_INVALID_ARGUMENT,
                "invalid update_info for backend 'nccl': a packed chunk would hold more bytes "
                "than 64 bits can count");
    c.bytes += sizes[i];
    c.last = i + 1;
    if (c.bytes > buffer) {
      out.push_back(c);
      c = Chunk{i + 1, i + 1, 0};
    }
  }
  if (c.last > c.first) out.push_back(c);
  return out;
}

}  // namespace wt::nccl
