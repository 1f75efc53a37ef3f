"""A PyTorch model trained for a few SGD steps, synced after each step through ipc, nccl (two
receivers, host memory) and sparse_nccl into `wt serve` processes: after every round each
receiver's /weight_checksums equals xxh3-64 of the trainer's tensors, computed here without wt."""

import torch

import wt
from conftest import free_port, write_safetensors, xxh3


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(64, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.proj = torch.nn.Linear(16, 24).to(torch.bfloat16)
        # A parameter that is a non-contiguous view (a transpose), as some layouts keep them.
        self.up = torch.nn.Parameter(torch.randn(32, 16).t())
        self.head = torch.nn.Linear(16, 64, bias=False)
        self.head.weight = self.embed.weight  # tied: sent once, under its first name

    def forward(self, ids):
        h = self.norm(self.embed(ids))
        h = h + self.proj(h.to(torch.bfloat16)).float()[:, :16]
        h = h + 0.01 * (h @ self.up) @ self.up.t()
        return self.head(h)


def train_step(model, opt, step):
    torch.manual_seed(100 + step)
    ids = torch.randint(0, 64, (8,))
    loss = torch.nn.functional.cross_entropy(model(ids), ids)
    opt.zero_grad()
    loss.backward()
    opt.step()


def expected(model):
    return {name: xxh3(p) for name, p in model.named_parameters()}


def assert_synced(urls, model, version):
    want = expected(model)
    for url in urls:
        client = wt.HttpClient(url)
        assert client.weight_checksums() == want, url
        assert client.get("/weight_checksums")["weight_version"] == version


def test_model_is_what_the_test_claims():
    m = Model()
    names = [n for n, _ in m.named_parameters()]
    assert "head.weight" not in names and "embed.weight" in names
    assert not m.up.is_contiguous() and m.proj.weight.dtype == torch.bfloat16


def test_ipc_into_wt_serve(serve):
    url = serve("ipc")
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    engine = wt.trainer_init({"backend": "ipc", "packed": True}, client=url, source=model)
    for step in range(3):
        train_step(model, opt, step)
        engine.send_weights(weight_version=f"step-{step}")
        assert_synced([url], model, f"step-{step}")
    engine.close()


def test_nccl_host_into_two_wt_serve(serve):
    urls = [serve("nccl"), serve("nccl")]
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    info = {"backend": "nccl", "master_address": "127.0.0.1", "master_port": free_port(),
            "world_size": 3, "packed": True}
    engine = wt.trainer_init(info, client=urls, source=model)
    for step in range(3):
        train_step(model, opt, step)
        engine.send_weights(weight_version=f"step-{step}")
        assert_synced(urls, model, f"step-{step}")
    engine.close()


def test_sparse_nccl_deltas_into_wt_serve(serve, tmp_path):
    model = Model()
    base = {n: p.detach().clone().contiguous() for n, p in model.named_parameters()}
    write_safetensors(tmp_path / "base.safetensors", base)
    url = serve("sparse_nccl", "--load-checkpoint", str(tmp_path / "base.safetensors"))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    info = {"backend": "sparse_nccl", "master_address": "127.0.0.1", "master_port": free_port(),
            "world_size": 2}
    engine = wt.trainer_init(info, client=url)
    before = base
    for step in range(3):
        train_step(model, opt, step)
        after = {n: p.detach().clone().contiguous() for n, p in model.named_parameters()}
        patches = wt.make_delta(before, after)
        assert patches, "an SGD step changes some weights"
        engine.send_weights(weight_version=f"step-{step}", patches=patches)
        assert_synced([url], model, f"step-{step}")
        before = after
    engine.close()


def test_parameters_replaced_or_reshaped_between_rounds_are_sent_as_they_are_now():
    # The export of a module's tensors is reused while a tensor is what it was; any change of
    # memory, dtype or layout is exported anew.
    receiver = wt.Receiver("ipc")
    model = torch.nn.Linear(4, 4)
    engine = wt.trainer_init({"backend": "ipc"}, client=receiver, source=model)
    engine.send_weights()
    with torch.no_grad():
        model.weight.mul_(3)  # in place: the same memory
    engine.send_weights()
    assert torch.equal(receiver.tensor("weight"), model.weight.detach())
    model.weight.data = torch.full((4, 4), 7.0)  # the same Parameter, other memory
    engine.send_weights()
    assert torch.equal(receiver.tensor("weight"), torch.full((4, 4), 7.0))
    model.weight.data = torch.arange(16.0).reshape(4, 4).t()  # other strides
    engine.send_weights()
    assert torch.equal(receiver.tensor("weight"), torch.arange(16.0).reshape(4, 4).t())
    engine.close()
