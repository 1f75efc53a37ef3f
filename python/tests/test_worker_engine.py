"""`wt launch`'s C++ trainer into a Python WorkerEngine behind a small HTTP server of vLLM's routes,
loading into an nn.Module through `destination`: every parameter equals the checkpoint, written
in place (its data_ptr unchanged), no extra copy."""

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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

    def __init__(self, backend, model):
        self.engine = None
        self.loaded, self.written = [], []
        params = dict(model.named_parameters())
        outer = self

        def destination(name):
            outer.written.append(name)
            return params[name]

        def load(name, tensor):  # only for tensors without a destination
            outer.loaded.append(name)
            with torch.no_grad():
                params[name].copy_(tensor)

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
                        outer.engine.receive(body["update_info"], load, destination)
                    elif self.path == "/finish_weight_update":
                        outer.engine.finish()
                    else:
                        return self.answer(404, {"detail": "Not Found"})
                except wt.Error as e:
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
