"""A Python inference engine in a few lines: wt.Receiver serves vLLM's routes (wt's own threaded
HTTP server) and hands each finished round to the engine's on_commit, which copies it into the
model's parameters. A round that does not finish never reaches them; an engine whose copy fails
fails the trainer's round, naming the tensor. The block in docs/python.md runs as written."""

import textwrap

import pytest
import torch

import wt
from conftest import DOCS, docs_python_block, free_port, raw_bytes, xxh3


def engine_recipe():
    return docs_python_block("### A Python engine")


def trainer(url, model):
    return wt.trainer_init({"backend": "nccl", "master_address": "127.0.0.1",
                            "master_port": free_port(), "packed": True}, client=url, source=model)


def same(a, b):
    return all(raw_bytes(p) == raw_bytes(q) for p, q in zip(a.parameters(), b.parameters()))


def failed_round(url, trained):
    """A round whose second tensor cannot be read on the trainer: it never finishes."""
    def source():
        def pairs():
            for name, p in trained.named_parameters():
                if name == "bias":
                    raise RuntimeError("the optimizer state is gone")
                yield name, p.detach() + 1
        return pairs()

    engine = wt.trainer_init({"backend": "nccl", "master_address": "127.0.0.1",
                              "master_port": free_port()}, client=url, source=source,
                             metadata=[(n, p.dtype, tuple(p.shape))
                                       for n, p in trained.named_parameters()])
    with pytest.raises(wt.Error, match="optimizer state is gone"):
        engine.send_weights(weight_version="failed")
    engine.close()


def test_the_docs_engine_receives_every_round_into_its_parameters():
    scope = {}
    exec(compile(engine_recipe().replace("port=8000", "port=0"), str(DOCS), "exec"), scope)
    model, url = scope["model"], scope["url"]
    torch.manual_seed(1)
    trained = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32),
                                  torch.nn.Linear(32, 4))
    assert not same(model, trained)
    engine = trainer(url, trained)
    for step in range(3):
        with torch.no_grad():
            for p in trained.parameters():
                p.add_(0.5)
        engine.send_weights(weight_version=f"step-{step}")
        assert same(model, trained), f"step {step}: the engine's parameters differ"
    engine.close()
    scope["receiver"].stop()


def test_a_round_that_does_not_finish_leaves_the_engines_parameters_as_they_were():
    model = torch.nn.Linear(8, 8)
    before = [raw_bytes(p) for p in model.parameters()]
    params = dict(model.named_parameters())

    def commit(name, tensor):
        with torch.no_grad():
            params[name].copy_(tensor)

    receiver = wt.Receiver("nccl", on_commit=commit)
    url = receiver.serve(port=0)
    failed_round(url, torch.nn.Linear(8, 8))
    assert [raw_bytes(p) for p in model.parameters()] == before
    assert receiver.rounds_finished == 0
    receiver.stop()


def test_an_engine_whose_copy_fails_fails_the_trainers_round_naming_the_tensor():
    def commit(name, tensor):
        raise ValueError(f"no parameter {name} here")

    receiver = wt.Receiver("nccl", on_commit=commit)
    url = receiver.serve(port=0)
    engine = trainer(url, {"w": torch.ones(4)})
    with pytest.raises(wt.Error, match=r"on_commit\('w'\) raised: ValueError: no parameter w"):
        engine.send_weights(weight_version="v")
    engine.close()
    receiver.stop()


def test_on_commit_must_be_callable():
    with pytest.raises(wt.InvalidArgument, match="on_commit must be callable"):
        wt.Receiver("nccl", on_commit=42)


def test_an_engine_that_keeps_the_committed_view_is_refused_naming_it():
    kept = []

    def commit(name, tensor):
        kept.append(tensor[:2])  # a view of wt's memory, kept past the call

    receiver = wt.Receiver("nccl", on_commit=commit)
    url = receiver.serve(port=0)
    engine = trainer(url, {"w": torch.ones(4)})
    with pytest.raises(wt.Error, match=r"on_commit\('w'\) kept the tensor it was given \(or a "
                                       r"view of it\) past the call.*copy it instead"):
        engine.send_weights(weight_version="v")
    engine.close()
    receiver.stop()


def test_an_engine_session_serves_the_engines_own_parameters_and_stages_each_round():
    """wt.EngineSession: vLLM's routes over the engine's parameters (the server `wt serve` is),
    no copy of the model held beyond the staging; a round that does not finish leaves them."""
    torch.manual_seed(2)
    served = torch.nn.Linear(8, 8)
    ptrs = {n: p.data_ptr() for n, p in served.named_parameters()}
    session = wt.EngineSession("nccl", served)
    url = session.serve(port=0)
    trained = torch.nn.Linear(8, 8)
    engine = trainer(url, trained)
    engine.send_weights(weight_version="v1")
    assert same(served, trained) and session.weight_version == "v1"
    assert all(p.data_ptr() == ptrs[n] for n, p in served.named_parameters())
    assert wt.HttpClient(url).weight_checksums() == {n: xxh3(p) for n, p in
                                                     served.named_parameters()}
    engine.close()
    before = [raw_bytes(p) for p in served.parameters()]

    failed_round(url, trained)
    assert [raw_bytes(p) for p in served.parameters()] == before
    assert session.weight_version == "v1"
    session.stop()
