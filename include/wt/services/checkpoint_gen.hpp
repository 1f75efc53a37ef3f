// Synthetic safetensors checkpoints with the tensor names and shapes of real LLM layouts, for
// demos, tests and benchmarks (`wt gen-checkpoint`). Values are small random floats (or small
// integers), reproducible from a seed.
#pragma once

#include <wt/requires_cxx20.hpp>

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

// Writes the checkpoint as `shards` files in `dir`: model.safetensors, or
// model-0000K-of-0000N.safetensors, plus a `.complete` marker naming what was generated. `dir`
// must not exist or be an empty directory: the files are written into a fresh directory beside it
// that is then renamed into place, so nothing of anyone else's is ever deleted or overwritten.
// Returns the file paths.
// True when `dir` holds a complete checkpoint that write_synthetic_checkpoint wrote with these
// parameters (its marker says so).
bool generated_checkpoint_present(const std::string& dir, const ModelLayout& layout, uint32_t seed,
                                  int shards);

std::vector<std::string> write_synthetic_checkpoint(const std::string& dir,
                                                    const ModelLayout& layout, uint32_t seed,
                                                    int shards = 1);

}  // namespace wt
