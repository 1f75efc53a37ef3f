// Box copies compiled once, executed every round. A piece that does not lie back to back in its
// tensor travels in a compact message buffer: the trainer rank packs it there from its source,
// the worker rank unpacks it into its TP slice. Working out how to walk the box (strides, offsets,
// which dimensions merge into one run) is done when the round's table is compiled; a round only
// walks runs of bytes, with no allocation and no per-dimension recursion, and several threads
// share a batch of copies by byte ranges of the batch's buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace wt::m2n {

// One box of one tensor, as `runs` runs of `run` bytes each. A message's copies lie back to back
// in its buffer, in order: run k of a copy is k * run bytes after the copy's first buffer byte
// and, in the tensor, at tensor_at plus the walk: k written in the mixed radix of the walk's
// counts (innermost last), each digit times its dimension's pitch. 40 bytes: the 1 T layout's
// worker rank 0 keeps 7.5 million of them.
struct CompiledCopy {
  uint64_t tensor_at = 0;  // bytes from the tensor's first byte to the box's first byte
  uint64_t run = 0;        // bytes of one run (the innermost dimensions that lie back to back)
  uint64_t runs = 0;       // runs in the box
  uint32_t param = 0;      // which tensor of the round
  uint32_t walk_at = 0;    // where its walk starts in CopyWalks::dims
  uint32_t walk_dims = 0;  // outer dimensions walked (0: the box is one run)
  uint64_t bytes() const { return run * runs; }
};

// The walks of a table's copies: per outer dimension, its count and its pitch in bytes in the
// tensor, outermost first. Copies with the same walk (tiles of one shape) share it.
struct CopyWalks {
  struct Dim {
    int64_t count = 0, pitch = 0;
    bool operator<(const Dim& o) const {
      return count != o.count ? count < o.count : pitch < o.pitch;
    }
  };
  std::vector<Dim> dims;
  std::map<std::vector<Dim>, uint32_t> known;  // while compiling: each walk's place in dims
};

// Compiles the copy of the box [lo, hi) of a tensor with `strides` (elements; the caller has
// checked every box element lies inside the tensor's memory) and `elem` bytes per element.
// Dimensions of extent 1 vanish, and an outer dimension whose pitch equals the run inside it
// joins the run.
CompiledCopy compile_copy(uint32_t param, const std::vector<int64_t>& strides,
                          const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
                          std::size_t elem, CopyWalks& walks);

enum class CopyDirection { kPack, kUnpack };  // tensor -> buffer, buffer -> tensor

// A message's copies and its buffer: what one execution moves.
struct CopyBatchItem {
  std::span<const CompiledCopy> copies;
  unsigned char* buffer = nullptr;
};

// Executes the copies of every item, `threads` threads (the caller's included) sharing equal byte
// ranges of the batch when it holds at least kParallelCopyMinBytes (parallel_copy.hpp), one
// thread otherwise. `tensors[param]` is each tensor's first byte. Returns when every byte is
// copied. Copies must not overlap at their destinations.
void execute_copies(std::span<const CopyBatchItem> batch, const CopyWalks& walks,
                    std::span<unsigned char* const> tensors, CopyDirection direction,
                    unsigned threads);

// The same copies queued on a CUDA stream of `device` (unified addressing), a run per copy.
void execute_copies_async(std::span<const CopyBatchItem> batch, const CopyWalks& walks,
                          std::span<unsigned char* const> tensors, CopyDirection direction,
                          int device, void* stream);

}  // namespace wt::m2n
