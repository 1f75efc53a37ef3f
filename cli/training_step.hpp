// The simulated training step of `wt launch` and `wt conformance`: change a fraction of every
// tensor's elements, and the delta patches of what changed, for sparse backends.
#pragma once

#include <wt/delta.hpp>
#include <wt/services/safetensors.hpp>

#include <cstdint>
#include <vector>

namespace wt::cli {

// Changes `fraction` of every tensor's elements (at least one, never to the same value), the same
// way on every rank (same seed).
void perturb(SafetensorsSource& s, double fraction, uint64_t seed);

// A copy of every tensor's bytes: what `deltas_against` compares with.
std::vector<std::vector<unsigned char>> snapshot(SafetensorsSource& s);

// The patches of every tensor that changed since `previous`, which then becomes the current.
std::vector<Delta> deltas_against(SafetensorsSource& checkpoint,
                                  std::vector<std::vector<unsigned char>>& previous);

}  // namespace wt::cli
