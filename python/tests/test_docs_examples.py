"""The examples of docs/python.md not run elsewhere, run as written: the trainer side's first
block (nccl into two deployments, no world_size) and the engine class over wt.WorkerEngine.
(The "Several trainer ranks" and "A Python engine" blocks run in test_trainer_group.py and
test_python_engine.py.)"""

import torch

import wt
from conftest import DOCS, docs_python_block, free_port, xxh3


def with_values(code, replacements):
    for placeholder, value in replacements:
        assert placeholder in code, f"docs/python.md's example no longer has {placeholder}"
        code = code.replace(placeholder, value)
    return code


class MyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)
        self.head = torch.nn.Linear(8, 4)


def train_step(model):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.25)


def test_the_trainer_sides_first_example_runs_as_written(serve):
    a, b = serve("nccl"), serve("nccl")
    code = with_values(docs_python_block("## Trainer side"),
                       [('"http://10.0.0.5:8000"', repr(a)), ('"http://10.0.0.6:8000"', repr(b)),
                        ('"master_port": 29517', f'"master_port": {free_port()}')])
    scope = {"MyModel": MyModel, "train_step": train_step, "steps": 2}
    exec(compile(code, str(DOCS), "exec"), scope)
    want = {n: xxh3(p) for n, p in scope["model"].named_parameters()}
    for url in (a, b):
        assert wt.HttpClient(url).weight_checksums() == want, url


def test_the_engine_class_over_a_worker_engine_runs_as_written():
    scope = {}
    exec(compile(docs_python_block("## Inference side"), str(DOCS), "exec"), scope)
    served = torch.nn.Linear(8, 8)
    engine = scope["Engine"](served)
    trained = torch.nn.Linear(8, 8)
    trainer = wt.trainer_init({"backend": "nccl", "master_address": "127.0.0.1",
                               "master_port": free_port(), "world_size": 2},
                              client=engine, source=trained)
    for step in range(2):
        train_step(trained)
        trainer.send_weights(weight_version=f"step-{step}")
        for name, p in served.named_parameters():
            assert torch.equal(p.detach(), dict(trained.named_parameters())[name].detach()), name
    trainer.close()
