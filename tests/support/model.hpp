// The deterministic test model: ~200 tensors of mixed dtypes in an LLM-like layout. Trainer
// helper processes and tests build the same one from the same seed, so expected checksums can be
// computed on either side.
#pragma once

#include "vector_source.hpp"

#include <wt/checksum.hpp>

#include <map>
#include <string>

namespace wt::test {

inline void fill_model(VectorSource& s, int layers = 40, int width = 64, uint32_t seed = 0) {
  constexpr DLDataType kF32{kDLFloat, 32, 1}, kBF16{kDLBfloat, 16, 1}, kF16{kDLFloat, 16, 1},
      kI64{kDLInt, 64, 1};
  const int64_t w = width;
  s.add("model.embed_tokens.weight", kBF16, {8 * w, w}, seed + 1);
  for (int l = 0; l < layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    uint32_t k = seed + 10 * static_cast<uint32_t>(l);
    s.add(p + "self_attn.qkv_proj.weight", kBF16, {3 * w, w}, k + 1);
    s.add(p + "self_attn.o_proj.weight", kF16, {w, w}, k + 2);
    s.add(p + "mlp.gate_up_proj.weight", kF32, {2 * w, w}, k + 3);
    s.add(p + "input_layernorm.weight", kF32, {w}, k + 4);
    s.add(p + "step", kI64, {}, k + 5);
  }
  s.add("lm_head.weight", kBF16, {8 * w, w}, seed + 7);
}

inline std::map<std::string, std::string> checksums_of(VectorSource& s) {
  std::map<std::string, std::string> out;
  for (auto& t : s.tensors()) out[t.name] = checksum_bytes(t.bytes.data(), t.bytes.size());
  return out;
}

// The model as it is after `rounds` training steps of the helper (perturb(r) after round r).
inline std::map<std::string, std::string> expected_after(int rounds, int layers, int width,
                                                         uint32_t seed) {
  VectorSource s;
  fill_model(s, layers, width, seed);
  for (int r = 0; r + 1 < rounds; ++r) s.perturb(static_cast<uint32_t>(r));
  return checksums_of(s);
}

}  // namespace wt::test
