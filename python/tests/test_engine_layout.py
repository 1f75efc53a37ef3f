"""An engine that holds its model as vLLM does — q, k and v fused into qkv_proj, gate and up into
gate_up_proj, experts stacked, the LM head tied to the embedding — serves it with
wt.EngineSession, and the m2n trainer sends its own unfused parameters with an engine_layout:
every fused tensor equals torch.cat / torch.stack of its parts, in the engine's own memory. A model
that does not hold what the engine layout composes is refused at init, naming the tensor."""

import pytest
import torch

import wt
from conftest import free_port

RULES = [
    {"fuse": "*.qkv_proj.weight", "parts": ["*.q_proj.weight", "*.k_proj.weight",
                                            "*.v_proj.weight"]},
    {"stack": "*.experts.w13_weight", "experts": 3,
     "parts": ["*.experts.#.gate_proj.weight", "*.experts.#.up_proj.weight"]},
    {"stack": "*.experts.w2_weight", "experts": 3, "parts": ["*.experts.#.down_proj.weight"]},
    {"tie": "lm_head.weight", "to": "embed.weight"},
]


def trainer_model(seed):
    torch.manual_seed(seed)
    model = {"embed.weight": torch.randn(32, 8).to(torch.bfloat16)}
    for layer in range(2):
        p = f"layers.{layer}."
        model[p + "q_proj.weight"] = torch.randn(8, 8).to(torch.bfloat16)
        model[p + "k_proj.weight"] = torch.randn(4, 8).to(torch.bfloat16)
        model[p + "v_proj.weight"] = torch.randn(4, 8).to(torch.bfloat16)
        model[p + "norm.weight"] = torch.randn(8)
        for e in range(3):
            model[p + f"experts.{e}.gate_proj.weight"] = torch.randn(6, 8).to(torch.bfloat16)
            model[p + f"experts.{e}.up_proj.weight"] = torch.randn(6, 8).to(torch.bfloat16)
            model[p + f"experts.{e}.down_proj.weight"] = torch.randn(8, 6).to(torch.bfloat16)
    return model


def engine_model():
    """The engine's own tensors, zeros: fused, stacked, and a head of its own memory."""
    model = {"embed.weight": torch.zeros(32, 8, dtype=torch.bfloat16),
             "lm_head.weight": torch.zeros(32, 8, dtype=torch.bfloat16)}
    for layer in range(2):
        p = f"layers.{layer}."
        model[p + "qkv_proj.weight"] = torch.zeros(16, 8, dtype=torch.bfloat16)
        model[p + "norm.weight"] = torch.zeros(8)
        model[p + "experts.w13_weight"] = torch.zeros(3, 12, 8, dtype=torch.bfloat16)
        model[p + "experts.w2_weight"] = torch.zeros(3, 8, 6, dtype=torch.bfloat16)
    return model


def expected_engine(src):
    """The engine's tensors from the trainer's, by torch alone."""
    out = {"embed.weight": src["embed.weight"], "lm_head.weight": src["embed.weight"]}
    for layer in range(2):
        p = f"layers.{layer}."
        out[p + "qkv_proj.weight"] = torch.cat([src[p + "q_proj.weight"], src[p + "k_proj.weight"],
                                                src[p + "v_proj.weight"]])
        out[p + "norm.weight"] = src[p + "norm.weight"]
        out[p + "experts.w13_weight"] = torch.stack([
            torch.cat([src[p + f"experts.{e}.gate_proj.weight"],
                       src[p + f"experts.{e}.up_proj.weight"]]) for e in range(3)])
        out[p + "experts.w2_weight"] = torch.stack([src[p + f"experts.{e}.down_proj.weight"]
                                                    for e in range(3)])
    return out


def m2n_info(**extra):
    return {"backend": "m2n", "master_address": "127.0.0.1", "master_port": free_port(),
            "rendezvous_timeout_s": 20, "transfer_timeout_s": 20, "engine_layout": RULES,
            **extra}


def test_an_engine_holding_fused_and_stacked_tensors_receives_into_them_every_round():
    served = engine_model()
    ptrs = {n: t.data_ptr() for n, t in served.items()}
    session = wt.EngineSession("m2n", served)
    url = session.serve(port=0)
    src = trainer_model(1)
    engine = wt.trainer_init(m2n_info(), client=url, source=src)
    for step in range(2):
        for t in src.values():
            t.add_(1)
        engine.send_weights(weight_version=f"step-{step}")
        want = expected_engine(src)
        assert sorted(served) == sorted(want)
        for name, t in want.items():
            assert torch.equal(served[name], t), name
    # In the engine's own memory, never replaced.
    assert all(t.data_ptr() == ptrs[n] for n, t in served.items())
    engine.close()
    session.stop()


def test_an_engine_model_the_layout_does_not_compose_is_refused_at_init_naming_the_tensor():
    served = engine_model()
    served["layers.1.qkv_proj.weight"] = torch.zeros(8, 8, dtype=torch.bfloat16)  # q only
    session = wt.EngineSession("m2n", served)
    url = session.serve(port=0)
    with pytest.raises(wt.Error, match=r"the m2n plan does not fit worker rank 0: parameter "
                                       r"'layers.1.qkv_proj.weight' is planned as bfloat16 "
                                       r"\[16, 8\] for tensor-parallel rank 0, but this worker "
                                       r"holds it as bfloat16 \[8, 8\]"):
        wt.trainer_init(m2n_info(), client=url, source=trainer_model(1))
    session.stop()


def test_a_rule_that_cannot_compose_is_refused_at_the_trainer_naming_the_rule():
    session = wt.EngineSession("m2n", engine_model())
    url = session.serve(port=0)
    rules = [{"fuse": "*.qkv_proj.weight", "parts": ["*.q_proj.weight", "*.norm.weight"]}]
    with pytest.raises(wt.Error, match=r"engine_layout\[0\]: 'layers.0.norm.weight' \(float32 "
                                       r"\[8\] per TP rank\) does not fuse with the parts before "
                                       r"it into 'layers.0.qkv_proj.weight'"):
        wt.trainer_init(m2n_info(engine_layout=rules), client=url, source=trainer_model(1))
    session.stop()


def fp8_info(**extra):
    return {"backend": "m2n", "master_address": "127.0.0.1", "master_port": free_port(),
            "rendezvous_timeout_s": 20, "transfer_timeout_s": 20,
            "wire_dtype": "float8_e4m3fn", **extra}


def test_a_nan_in_a_block_fp8_weight_is_refused_at_the_sender_naming_it_and_nothing_lands(serve):
    url = serve("m2n")
    torch.manual_seed(3)
    model = {"layers.0.mlp.up_proj.weight": torch.randn(256, 64).to(torch.bfloat16),
             "layers.0.norm.weight": torch.randn(64)}
    engine = wt.trainer_init(fp8_info(), client=url, source=model)
    engine.send_weights(weight_version="v1")
    before = wt.HttpClient(url).weight_checksums()
    assert set(before) == {"layers.0.mlp.up_proj.weight", "layers.0.mlp.up_proj.weight_scale_inv",
                           "layers.0.norm.weight"}
    model["layers.0.mlp.up_proj.weight"][130, 7] = float("nan")
    with pytest.raises(wt.Error, match=r"cannot send tensor 'layers.0.mlp.up_proj.weight' as "
                                       r"block FP8: element \[130, 7\] is NaN; no scale can "
                                       r"carry it"):
        engine.send_weights(weight_version="v2")
    assert wt.HttpClient(url).weight_checksums() == before
    engine.close()


def test_an_engine_that_holds_bfloat16_where_the_plan_sends_block_fp8_is_refused_at_init():
    served = {"layers.0.mlp.up_proj.weight": torch.zeros(256, 64, dtype=torch.bfloat16),
              "layers.0.mlp.up_proj.weight_scale_inv": torch.zeros(2, 1)}
    session = wt.EngineSession("m2n", served)
    url = session.serve(port=0)
    with pytest.raises(wt.Error, match=r"parameter 'layers.0.mlp.up_proj.weight' is planned as "
                                       r"float8_e4m3fn \[256, 64\] for tensor-parallel rank 0, "
                                       r"but this worker holds it as bfloat16 \[256, 64\]"):
        wt.trainer_init(fp8_info(), client=url,
                        source={"layers.0.mlp.up_proj.weight": torch.randn(256, 64).to(
                            torch.bfloat16)})
    session.stop()


def test_fp8_scales_without_block_fp8_is_refused_naming_the_field(serve):
    url = serve("m2n")
    with pytest.raises(wt.Error, match=r"field 'fp8_scales' is for block FP8; it means nothing "
                                       r"with wire_dtype \"as-held\""):
        wt.trainer_init({"backend": "m2n", "master_address": "127.0.0.1",
                         "master_port": free_port(), "fp8_scales": "ue8m0"}, client=url,
                        source={"w": torch.zeros(4, 4)})
