"""`wt launch`'s C++ trainer into a Python WorkerEngine behind a small HTTP server of vLLM's routes,
loading into an nn.Module through `destination`: every parameter equals the checkpoint, written
in place (its data_ptr unchanged), no extra copy. Delta patches from a Python trainer land in the
module through `patch_into`, checked as a whole batch before any is written."""

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

import wt
from conftest import CLI, free_port, write_safetensors


class Inference(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(32, 8)
        self.proj = torch.nn.Linear(8, 12).to(torch.bfloat16)
        for p in self.parameters():
            torch.nn.init.zeros_(p)


class WorkerServer:
    """vLLM's weight-transfer routes over one wt.WorkerEngine that loads into `model`."""

    def __init__(self, backend, model, patches=True):
        self.engine = None
        self.loaded, self.written, self.patched, self.errors = [], [], [], []
        params = dict(model.named_parameters())
        outer = self

        def destination(name):
            outer.written.append(name)
            return params[name]

        def load(name, tensor):  # only for tensors without a destination
            outer.loaded.append(name)
            with torch.no_grad():
                params[name].copy_(tensor)

        def patch_into(name):
            outer.patched.append(name)
            return params[name].data if name in params else None

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.startswith("/get_world_size"):
                    return self.answer(200, {"world_size": 1})
                self.answer(404, {"detail": "Not Found"})

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                try:
                    if self.path == "/init_weight_transfer_engine":
                        outer.engine = wt.WorkerEngine(backend, body["init_info"])
                    elif self.path == "/start_weight_update":
                        outer.engine.start()
                    elif self.path == "/update_weights":
                        outer.engine.receive(body["update_info"], load, destination,
                                             patch_into=patch_into if patches else None)
                    elif self.path == "/finish_weight_update":
                        outer.engine.finish()
                    else:
                        return self.answer(404, {"detail": "Not Found"})
                except wt.Error as e:
                    outer.errors.append(e)
                    if self.path == "/update_weights":
                        outer.engine.abort()  # the round is over: the next start begins anew
                    return self.answer(400, {"error": str(e)})
                self.answer(200, {"message": "ok"})

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self):
        self.http.shutdown()


def test_wt_launch_into_a_python_worker_writes_the_parameters_in_place(tmp_path):
    torch.manual_seed(3)
    weights = {"embed.weight": torch.randn(32, 8),
               "proj.weight": torch.randn(12, 8).to(torch.bfloat16),
               "proj.bias": torch.randn(12).to(torch.bfloat16)}
    write_safetensors(tmp_path / "model.safetensors", weights)
    model = Inference()
    ptrs = {n: p.data_ptr() for n, p in model.named_parameters()}
    server = WorkerServer("nccl", model)
    config = {"backend": "nccl",
              "init_info": {"master_address": "127.0.0.1", "master_port": free_port(),
                            "packed": False},
              "source": {"safetensors": str(tmp_path / "model.safetensors")},
              "receiver": {"url": server.url, "timeout_s": 60},
              "rounds": 1, "training_step": {"perturb_fraction": 0.0}, "verify": False}
    try:
        report = wt.launch(config, timeout_s=120)
    finally:
        server.close()
    assert report["ok"], report
    assert sorted(server.written) == sorted(weights)
    assert server.loaded == []
    for name, p in model.named_parameters():
        assert p.data_ptr() == ptrs[name], name
        assert torch.equal(p.detach(), weights[name]), name


def test_a_destination_of_the_wrong_shape_is_refused_naming_it(tmp_path):
    receiver = wt.Receiver("ipc")
    source = {"w": torch.ones(4, 4)}
    trainer = wt.trainer_init({"backend": "ipc"}, client=receiver, source=source)
    trainer.close()
    # The same update, received by a Python worker whose model has w as 2x8.
    captured = {}

    class Capture:
        def init_weight_transfer_engine(self, info):
            captured["init"] = info

        def start_weight_update(self):
            pass

        def update_weights(self, info):
            captured["update"] = info
            worker = wt.WorkerEngine("ipc", captured["init"])
            worker.start()
            wrong = torch.zeros(2, 8)
            try:
                worker.receive(info, lambda n, t: None, lambda n: wrong)
            except wt.InvalidArgument as e:
                captured["error"] = str(e)
            worker.abort()

        def finish_weight_update(self, weight_version=None):
            pass

    engine = wt.trainer_init({"backend": "ipc"}, client=Capture(), source=source)
    engine.send_weights()
    engine.close()
    assert "destination('w') returned a float32 2x8 tensor, but the update sends float32 4x4" in \
        captured["error"]


def test_delta_patches_from_a_python_trainer_are_written_into_a_python_workers_module():
    torch.manual_seed(5)
    model = Inference()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p.float()).to(p.dtype))
    ptrs = {n: p.data_ptr() for n, p in model.named_parameters()}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    server = WorkerServer("sparse_nccl", model)
    info = {"backend": "sparse_nccl", "master_address": "127.0.0.1", "master_port": free_port(),
            "world_size": 2}
    engine = wt.trainer_init(info, client=server.url)
    try:
        for step in range(2):
            after = {n: t.clone() for n, t in before.items()}
            after["embed.weight"][step::5] += 1.0
            after["proj.bias"][3] = -7.0
            engine.send_weights(weight_version=f"step-{step}", patches=wt.make_delta(before, after))
            for name, p in model.named_parameters():
                assert p.data_ptr() == ptrs[name], name
                assert torch.equal(p.detach(), after[name]), name
            before = after
        # A patch whose full_shape is not the worker's tensor's: the batch is refused whole, the
        # parameter named, and the other patch of the batch is not written either.
        wrong = wt.SparsePatch("proj.bias", torch.tensor([0], dtype=torch.int32),
                               torch.tensor([1.0], dtype=torch.bfloat16), (6, 2))
        good = wt.SparsePatch("embed.weight", torch.tensor([0], dtype=torch.int32),
                              torch.tensor([100.0]), (32, 8))
        try:
            engine.send_weights(patches=[good, wrong])
            raise AssertionError("the round should fail")
        except wt.Error as e:
            assert "proj.bias" in str(e), e
        assert "patch for 'proj.bias' refused: full_shape [6, 2] differs from the parameter's " \
            "shape [12]" in str(server.errors[0])
        for name, p in model.named_parameters():
            assert torch.equal(p.detach(), before[name]), name
        # A failed round ends the group: a new trainer engine (a new init) syncs on.
        engine.close()
        info["master_port"] = free_port()
        engine = wt.trainer_init(info, client=server.url)
        after = {n: t.clone() for n, t in before.items()}
        after["proj.weight"][0, 0] = 3.0
        engine.send_weights(patches=wt.make_delta(before, after))
        for name, p in model.named_parameters():
            assert torch.equal(p.detach(), after[name]), name
    finally:
        engine.close()
        server.close()


def test_a_worker_without_patch_into_refuses_patches_saying_what_to_pass():
    model = Inference()
    server = WorkerServer("sparse_nccl", model, patches=False)
    info = {"backend": "sparse_nccl", "master_address": "127.0.0.1", "master_port": free_port(),
            "world_size": 2}
    engine = wt.trainer_init(info, client=server.url)
    patch = wt.SparsePatch("proj.bias", torch.tensor([1], dtype=torch.int32),
                           torch.tensor([2.0], dtype=torch.bfloat16), (12,))
    try:
        try:
            engine.send_weights(patches=[patch])
            raise AssertionError("the round should fail")
        except wt.Error as e:
            assert "pass receive(..., patch_into=...)" in str(e), e
        assert isinstance(server.errors[0], wt.Unsupported), server.errors
        assert torch.equal(model.proj.bias.detach(), torch.zeros(12, dtype=torch.bfloat16))
    finally:
        engine.close()
        server.close()


class StagingEngine:
    """An engine driven in-process by the trainer: a WorkerEngine writing into `model`'s
    parameters through `destination`, failing the round in update_weights when told to."""

    def __init__(self, model, staged):
        self.params = dict(model.named_parameters())
        self.staged, self.fail, self.worker, self.seen = staged, False, None, None

    def init_weight_transfer_engine(self, info):
        self.worker = wt.WorkerEngine("ipc", info, staged=self.staged)

    def start_weight_update(self):
        self.worker.start()

    def update_weights(self, info):
        self.worker.receive(info, destination=self.params.get)
        self.seen = {n: p.detach().clone() for n, p in self.params.items()}
        if self.fail:
            self.worker.abort()
            raise RuntimeError("the engine fails this round after receiving it")

    def finish_weight_update(self, weight_version=None):
        self.worker.finish()


def failed_then_finished_round(staged):
    """A round the engine fails after receiving it, then one that finishes: the parameters after
    each, and what they held right after the second round's receive."""
    torch.manual_seed(7)
    model = torch.nn.Linear(4, 4)
    params = lambda: {n: p.detach().clone() for n, p in model.named_parameters()}  # noqa: E731
    ptrs = {n: p.data_ptr() for n, p in model.named_parameters()}
    new = {"weight": torch.randn(4, 4), "bias": torch.randn(4)}
    engine = StagingEngine(model, staged=staged)
    trainer = wt.trainer_init({"backend": "ipc"}, client=engine, source=new)
    before = params()
    engine.fail = True
    with pytest.raises(wt.Error, match="the engine fails this round"):
        trainer.send_weights(weight_version="v1")
    after_failed = params()
    engine.fail = False
    trainer.send_weights(weight_version="v2")
    trainer.close()
    assert {n: p.data_ptr() for n, p in model.named_parameters()} == ptrs  # written in place
    return before, new, after_failed, engine.seen, params()


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def test_a_staged_worker_changes_no_parameter_until_the_round_finishes():
    before, new, after_failed, after_receive, after_finish = failed_then_finished_round(True)
    assert same(after_failed, before)  # received, never finished: nothing changed
    assert same(after_receive, before)  # still staged after receive
    assert same(after_finish, new)  # copied over at finish


def test_an_unstaged_worker_writes_during_receive_and_a_failed_round_shows():
    before, new, after_failed, after_receive, after_finish = failed_then_finished_round(False)
    assert not same(before, new) and same(after_failed, new)  # the unfinished round is there
    assert same(after_receive, new) and same(after_finish, new)


def test_a_load_that_keeps_its_view_is_refused_and_one_that_copies_is_not():
    kept, copied, errors = [], {}, []

    class Engine(StagingEngine):
        def update_weights(self, info):
            for load in (lambda n, t: kept.append(t), lambda n, t: copied.update({n: t.clone()})):
                self.worker.start()
                try:
                    self.worker.receive(info, load=load)
                except wt.Error as e:
                    errors.append(str(e))
                    self.worker.abort()

        def start_weight_update(self):
            pass

        def finish_weight_update(self, weight_version=None):
            pass

    engine = Engine(torch.nn.Linear(2, 2), staged=True)
    trainer = wt.trainer_init({"backend": "ipc"}, client=engine, source={"w": torch.arange(4.0)})
    trainer.send_weights()
    trainer.close()
    assert errors == ["ipc worker receive failed: the loader's load failed: "
                      "load('w') kept the tensor it was given (or a view of it) past the call: "
                      "its memory is wt's, reused after the round; copy it instead "
                      "(param.copy_(tensor), tensor.clone())"]
    assert torch.equal(copied["w"], torch.arange(4.0))
