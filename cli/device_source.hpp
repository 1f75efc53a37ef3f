// A weight source's tensors in CUDA memory, for `wt launch` trainers whose backend moves CUDA
// memory (init_info.device: cuda:N): each pass copies every tensor of the wrapped (host) source
// to device N, once per round, into allocations kept across rounds, then yields those. The
// copies are synchronous: the tensors are complete when yielded.
#pragma once

#include <wt/weight_source.hpp>

#include <memory>

namespace wt::cli {

// Throws wt::Error (WT_ERR_UNSUPPORTED) when CUDA cannot be used here, saying why.
std::unique_ptr<WeightSource> make_device_source(WeightSource& host, int device);

}  // namespace wt::cli
