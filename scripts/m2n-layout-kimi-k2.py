#!/usr/bin/env python3
"""Writes the m2n layout of Kimi-K2 (1 T parameters, DeepSeek-V3 architecture) from its published
configuration: 256 trainer ranks holding every parameter FSDP-sharded along dim 0, and 16 inference
replicas of tensor-parallel 8 with vLLM's rules (column-parallel layers and the vocabulary split
along dim 0, row-parallel along dim 1, MLA's down-projections, norms and the router replicated).

    scripts/m2n-layout-kimi-k2.py > configs/layouts/kimi-k2-1t.json
    scripts/m2n-layout-kimi-k2.py --engine > configs/layouts/kimi-k2-1t-engine.json
    build/bin/wt plan configs/layouts/kimi-k2-1t.json --anchor-s 1.3

--engine adds vLLM's own parameters for the model (DeepseekV2 in vLLM): MLA's q_a and kv_a
projections fused into fused_qkv_a_proj, gate and up fused into gate_up_proj (the dense layer and
the shared experts), and each MoE layer's 384 experts stacked into w13_weight and w2_weight.
"""
import json
import sys

# config.json of moonshotai/Kimi-K2-Instruct
vocab, hidden, layers, first_dense = 163840, 7168, 61, 1
dense_ffn, expert_ffn, experts, shared_experts = 18432, 2048, 384, 1
heads, q_lora, kv_lora, nope, rope, v_head = 64, 1536, 512, 128, 64, 128

params = []


def add(name, shape, ranges=None, dtype="bfloat16"):
    entry = {"name": name, "dtype": dtype, "shape": shape}
    if ranges:
        entry["ranges"] = ranges
    params.append(entry)


every = [[0, layers]]
moe = [[first_dense, layers]]
add("model.embed_tokens.weight", [vocab, hidden])
add("model.layers.{}.input_layernorm.weight", [hidden], every)
add("model.layers.{}.post_attention_layernorm.weight", [hidden], every)
add("model.layers.{}.self_attn.q_a_proj.weight", [q_lora, hidden], every)
add("model.layers.{}.self_attn.q_a_layernorm.weight", [q_lora], every)
add("model.layers.{}.self_attn.q_b_proj.weight", [heads * (nope + rope), q_lora], every)
add("model.layers.{}.self_attn.kv_a_proj_with_mqa.weight", [kv_lora + rope, hidden], every)
add("model.layers.{}.self_attn.kv_a_layernorm.weight", [kv_lora], every)
add("model.layers.{}.self_attn.kv_b_proj.weight", [heads * (nope + v_head), kv_lora], every)
add("model.layers.{}.self_attn.o_proj.weight", [hidden, heads * v_head], every)
for proj, shape in (("gate_proj", [dense_ffn, hidden]), ("up_proj", [dense_ffn, hidden]),
                    ("down_proj", [hidden, dense_ffn])):
    add(f"model.layers.{{}}.mlp.{proj}.weight", shape, [[0, first_dense]])
add("model.layers.{}.mlp.gate.weight", [experts, hidden], moe)
add("model.layers.{}.mlp.gate.e_score_correction_bias", [experts], moe, dtype="float32")
for proj, shape in (("gate_proj", [expert_ffn, hidden]), ("up_proj", [expert_ffn, hidden]),
                    ("down_proj", [hidden, expert_ffn])):
    add(f"model.layers.{{}}.mlp.experts.{{}}.{proj}.weight", shape, moe + [[0, experts]])
    add(f"model.layers.{{}}.mlp.shared_experts.{proj}.weight",
        [shape[0] * shared_experts, shape[1]] if proj != "down_proj"
        else [shape[0], shape[1] * shared_experts], moe)
add("model.norm.weight", [hidden])
add("lm_head.weight", [vocab, hidden])

layout = {
    "description": "Kimi-K2 (1 T parameters): 256 FSDP trainer ranks -> 16 x TP 8 inference ranks",
    "parameters": params,
    "trainer": {"ranks": 256, "holdings": [{"match": "*", "shard_dim": 0}]},
    "inference": {
        "replicas": 16,
        "tensor_parallel": 8,
        "rules": [
            {"match": "*.q_b_proj.weight", "dim": 0},
            {"match": "*.kv_b_proj.weight", "dim": 0},
            {"match": "*.gate_proj.weight", "dim": 0},
            {"match": "*.up_proj.weight", "dim": 0},
            {"match": "*.o_proj.weight", "dim": 1},
            {"match": "*.down_proj.weight", "dim": 1},
            {"match": "model.embed_tokens.weight", "dim": 0},
            {"match": "lm_head.weight", "dim": 0},
            {"match": "*", "dim": -1},
        ],
    },
}
if "--engine" in sys.argv[1:]:
    layout["description"] = ("Kimi-K2 (1 T parameters) into vLLM's own parameters (fused "
                             "projections, stacked experts): 256 FSDP trainer ranks -> 16 x TP 8")
    layout["engine"] = [
        {"fuse": "*.self_attn.fused_qkv_a_proj.weight",
         "parts": ["*.self_attn.q_a_proj.weight", "*.self_attn.kv_a_proj_with_mqa.weight"]},
        {"stack": "*.mlp.experts.w13_weight", "experts": experts,
         "parts": ["*.mlp.experts.#.gate_proj.weight", "*.mlp.experts.#.up_proj.weight"]},
        {"stack": "*.mlp.experts.w2_weight", "experts": experts,
         "parts": ["*.mlp.experts.#.down_proj.weight"]},
        {"fuse": "*.mlp.shared_experts.gate_up_proj.weight",
         "parts": ["*.mlp.shared_experts.gate_proj.weight", "*.mlp.shared_experts.up_proj.weight"]},
        {"fuse": "*.mlp.gate_up_proj.weight",
         "parts": ["*.mlp.gate_proj.weight", "*.mlp.up_proj.weight"]},
    ]
json.dump(layout, sys.stdout, indent=1)
sys.stdout.write("\n")
