// Synthetic safetensors checkpoints with the tensor names and shapes of real LLM layouts, for
// demos, tests and benchmarks (`wt gen-checkpoint`). Values are small random floats (or small
// integers), reproducible from a seed.
#pragma once

#include <wt/tensor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace wt {

struct ModelLayout {
  std::string name;
  std::string description;
  std::vector<ParamMeta> params;
  uint64_t total_bytes() const;
  uint64_t total_params() const;
};

// "qwen2.5-0.5b" (the default), "llama-3.2-1b", "tiny".
std::vector<std::string> known_model_layouts();
ModelLayout model_layout(const std::string& name, DLDataType dtype);

// Writes the checkpoint as `shards` files in `dir` (created if needed): model.safetensors, or
// model-0000K-of-0000N.safetensors. Returns the file paths.
std::vector<std::string> write_synthetic_checkpoint(const std::string& dir,
                                                    const ModelLayout& layout, uint32_t seed,
                                                    int shards = 1);

}  // namespace wt
