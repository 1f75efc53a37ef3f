// The deterministic test model: ~200 tensors of mixed dtypes in an LLM-like layout. Trainer
// helper processes and tests build the same one from the same seed, so expected checksums can be
// computed on either side.
#pragma once

#include "vector_source.hpp"

#include <wt/checksum.hpp>

#include <map>
#include <string>

namespace wt::test {

// edge: first the tensors that break careless layouts: bfloat16[3] then float32[5] (packed back
// to back, the float32 would start at +6 bytes) and two zero-element tensors (null data).
inline void fill_model(VectorSource& s, int layers = 40, int width = 64, uint32_t seed = 0,
                       bool edge = false) {
  constexpr DLDataType kF32{kDLFloat, 32, 1}, kBF16{kDLBfloat, 16, 1}, kF16{kDLFloat, 16, 1},
      kI64{kDLInt, 64, 1};
  const int64_t w = width;
  if (edge) {
    s.add("edge.bf16x3", kBF16, {3}, seed + 90001);
    s.add("edge.f32x5", kF32, {5}, seed + 90002);
    s.add("edge.empty_f32", kF32, {0}, seed + 90003);
    s.add("edge.empty_bf16", kBF16, {4, 0}, seed + 90004);
  }
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
                                                         uint32_t seed, bool edge = false) {
  VectorSource s;
  fill_model(s, layers, width, seed, edge);
  for (int r = 0; r + 1 < rounds; ++r) s.perturb(static_cast<uint32_t>(r));
  return checksums_of(s);
}

}  // namespace wt::test
