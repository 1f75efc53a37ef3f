"""Several Python trainer ranks, as torchrun starts them: each process calls
torch.distributed.init_process_group() and wt.trainer_init with FSDP-style shards (dim 0, torch's
chunk split, the last rank holding less), wt's gathers go over the process group, and m2n moves
every rank's rows straight into `wt serve`, byte-exact, with no world_size in the init info (it
is counted from the receiver, as `wt launch` does). Also: a rank whose init info disagrees with its
group is refused, and a launcher's RANK with no group is refused instead of a silent no-op."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch

import wt
from conftest import Serve, SilentControl, docs_python_block, free_port, xxh3


def recipe():
    return docs_python_block("### Several trainer ranks")


# One trainer rank: the docs' recipe with the test's receiver and port, then rank 0 checks every
# tensor on the receiver against its own full model.
CHECK = textwrap.dedent("""
    if rank == 0:
        import xxhash
        def raw(t):
            t = t.contiguous()
            return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        want = {n: xxhash.xxh3_64_hexdigest(raw(t)) for n, t in full.items()}
        if BY_RANK:  # a receiver of several worker ranks: each one's own
            ranks = wt.HttpClient(URL).get("/weight_checksums")["ranks"]
            assert len(ranks) == 2 and all(r["checksums"] == want for r in ranks), (ranks, want)
        else:
            got = wt.HttpClient(URL).weight_checksums()
            assert got == want, (got, want)
        print(f"OK: {world} ranks, 2 rounds, {len(want)} tensors byte-exact")
    dist.destroy_process_group()
""")


def rank_script(url, port, by_rank):
    code = recipe()
    for placeholder in ('"http://10.0.0.5:8000"', '"master_port": 29531'):
        assert placeholder in code, f"docs/python.md's recipe no longer has {placeholder}"
    code = code.replace('"http://10.0.0.5:8000"', repr(url))
    code = code.replace('"master_port": 29531', f'"master_port": {port}')
    return f"URL, BY_RANK = {url!r}, {by_rank!r}\n" + code + CHECK


def run_ranks(tmp_path, world, url, by_rank=False, code=None):
    """Starts `world` ranks as torchrun does, each running `code` (default: the docs' recipe)."""
    script = tmp_path / "train.py"
    script.write_text(code if code is not None else rank_script(url, free_port(), by_rank))
    group_port = free_port()
    procs = []
    for rank in range(world):  # as torchrun starts them
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(group_port))
        procs.append(subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, env=env))
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append((p.returncode, out))
    return outs


@pytest.mark.parametrize("world", [2, 3])
def test_m2n_from_several_python_trainer_ranks_is_byte_exact(serve, tmp_path, world):
    url = serve("m2n")
    outs = run_ranks(tmp_path, world, url)
    for rank, (code, out) in enumerate(outs):
        assert code == 0, f"rank {rank} failed:\n{out}"
    assert f"OK: {world} ranks, 2 rounds, 4 tensors byte-exact" in outs[0][1]


def test_m2n_from_two_python_ranks_into_a_replica_of_tp2(tmp_path):
    server = Serve("m2n", "--tensor-parallel-size", "2")
    try:
        # The script's init info has no TP rules: every tensor goes whole to both worker ranks
        # (world_size 1 + 2, counted from the receiver's /get_world_size).
        outs = run_ranks(tmp_path, 2, server.url, by_rank=True)
        for rank, (code, out) in enumerate(outs):
            assert code == 0, f"rank {rank} failed:\n{out}"
        assert "OK: 2 ranks, 2 rounds, 4 tensors byte-exact" in outs[0][1]
    finally:
        server.stop()


class OneRankGroup:
    """wt's own group form: rank(), size(), all_gather(bytes), barrier()."""

    def __init__(self, rank, size):
        self._rank, self._size = rank, size

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def all_gather(self, mine):
        return [mine] * self._size

    def barrier(self):
        pass


def test_an_init_info_rank_that_disagrees_with_the_group_is_refused():
    with pytest.raises(wt.InvalidArgument,
                       match="init_info rank is 1, but this process is rank 0 of its trainer "
                             "group of 1") as e:
        wt.trainer_init({"backend": "ipc", "rank": 1}, client=wt.Receiver("ipc"),
                        source={"w": torch.zeros(2)}, group=OneRankGroup(0, 1))
    assert e.value.field == "rank"


def test_a_group_that_is_not_one_is_refused_naming_what_it_lacks():
    with pytest.raises(wt.InvalidArgument, match=r"group: .* has no rank\(\)"):
        wt.trainer_init({"backend": "ipc"}, client=wt.Receiver("ipc"),
                        source={"w": torch.zeros(2)}, group=type("G", (), {"all_gather": 1,
                                                                          "barrier": 1,
                                                                          "size": 1})())


def test_a_launchers_rank_without_a_group_is_refused_not_a_silent_no_op(monkeypatch, serve):
    url = serve("nccl")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(wt.InvalidArgument, match=r"the environment says RANK=1, WORLD_SIZE=2 .* "
                                                 r"call torch.distributed.init_process_group\(\)"):
        wt.trainer_init({"backend": "nccl", "master_address": "127.0.0.1",
                         "master_port": free_port()}, client=url, source={"w": torch.zeros(4)})


def test_world_size_is_counted_from_the_receivers_for_every_client_form(serve):
    """The first example of docs/python.md: nccl, a list of URLs, no world_size."""
    urls = [serve("nccl"), serve("nccl")]
    w = {"w": torch.arange(12, dtype=torch.float32)}
    for client in (urls, urls[0], wt.HttpClient(urls[0]), [wt.HttpClient(u) for u in urls]):
        engine = wt.trainer_init({"backend": "nccl", "master_address": "127.0.0.1",
                                  "master_port": free_port(), "packed": True},
                                 client=client, source=w)
        engine.send_weights(weight_version="v")
        engine.close()
        targets = client if isinstance(client, list) else [client]
        for t in targets:
            http = t if isinstance(t, wt.HttpClient) else wt.HttpClient(t)
            assert http.weight_checksums() == {"w": xxh3(w["w"])}
        w["w"].add_(1)


def test_a_python_client_without_get_world_size_is_told_what_to_give():
    with pytest.raises(wt.InvalidArgument, match=r"init_info has no world_size, and the client "
                                                 r"has no get_world_size\(\)"):
        wt.trainer_init({"backend": "nccl", "master_address": "127.0.0.1",
                         "master_port": free_port()}, client=SilentControl(),
                        source={"w": torch.zeros(4)})


def test_a_start_one_receiver_refuses_leaves_no_other_receiver_mid_update(serve):
    """Two receivers; the second is already mid-update (someone else's start), so the round's
    start fails there: the first, which started the round, is ended at once."""
    urls = [serve("nccl"), serve("nccl")]
    engine = wt.trainer_init({"backend": "nccl", "master_address": "127.0.0.1",
                              "master_port": free_port()}, client=urls,
                             source={"w": torch.zeros(4)})
    wt.HttpClient(urls[1]).start_weight_update()
    with pytest.raises(wt.Error, match=r"receiver 2 of 2 .*already active"):
        engine.send_weights(weight_version="v")
    assert wt.HttpClient(urls[0]).get("/health")["update_active"] is False
    assert wt.HttpClient(urls[1]).get("/health")["update_active"] is True  # not ours to end
    engine.close()


def test_ctrl_c_ends_a_trainer_init_held_by_a_receiver_that_never_answers(tmp_path):
    """A receiver that accepts the init call and never answers, and a rendezvous deadline of
    120 s: Ctrl-C ends trainer_init within seconds, as wt.Aborted caused by the
    KeyboardInterrupt."""
    script = tmp_path / "held.py"
    script.write_text(textwrap.dedent("""
        import socket, sys, threading, time
        import torch, wt
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        held = []
        threading.Thread(target=lambda: [held.append(silent.accept()) for _ in range(8)],
                         daemon=True).start()
        print("calling", flush=True)
        t0 = time.monotonic()
        try:
            wt.trainer_init({"backend": "nccl", "master_address": "127.0.0.1",
                             "master_port": int(sys.argv[1]), "world_size": 2,
                             "rendezvous_timeout_s": 120},
                            client=f"http://127.0.0.1:{silent.getsockname()[1]}",
                            source={"w": torch.zeros(4)})
        except wt.Aborted as e:
            print(f"aborted after {time.monotonic() - t0:.1f} s: {e}; "
                  f"cause {type(e.__cause__).__name__}", flush=True)
    """))
    p = subprocess.Popen([sys.executable, str(script), str(free_port())], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    assert p.stdout.readline().strip() == "calling"
    import signal
    import time
    time.sleep(1.5)
    p.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    out, _ = p.communicate(timeout=60)
    took = time.monotonic() - t0
    assert "trainer_init interrupted (KeyboardInterrupt)" in out and \
        "cause KeyboardInterrupt" in out, out
    assert took < 10, f"trainer_init took {took:.1f} s to end after Ctrl-C:\n{out}"


def test_a_state_dict_with_tied_weights_sends_the_tied_tensor_once_and_says_which(serve):
    url = serve("ipc")
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight  # tied, as an LM's head and embeddings
    with pytest.warns(UserWarning, match="tied tensors are sent once, under their first name: "
                                         "'1.weight' is '0.weight'"):
        engine = wt.trainer_init({"backend": "ipc"}, client=url, source=model.state_dict())
    engine.send_weights(weight_version="v")
    assert wt.HttpClient(url).weight_checksums() == {"0.weight": xxh3(model[0].weight)}
    engine.close()


def test_a_pinned_source_follows_a_parameter_whose_data_was_replaced(serve):
    url = serve("ipc")
    model = torch.nn.Linear(4, 4)
    engine = wt.trainer_init({"backend": "ipc"}, client=url, source=wt.PinnedSource(model))
    engine.send_weights(weight_version="v1")
    model.weight.data = torch.full((4, 4), 7.0)  # new memory under the same Parameter
    engine.send_weights(weight_version="v2")
    assert wt.HttpClient(url).weight_checksums()["weight"] == xxh3(torch.full((4, 4), 7.0))
    model.weight.data = torch.zeros(2, 8)  # another shape: the plan of the engine is fixed
    with pytest.raises(wt.InvalidArgument, match=r"tensor 'weight' of the pinned source was "
                                                 r"replaced by one of another dtype or shape"):
        engine.send_weights(weight_version="v3")
    engine.close()


# torch 1.13's ShardedTensor and later torch's DTensor, as stand-ins of their documented
# attributes (Debian's torch 1.13 cannot import ShardedTensor under Python 3.11, and has no
# DTensor): a source of them is read as wt.Shard without any written by hand.
FOREIGN = textwrap.dedent("""
    import math, types
    import torch, torch.distributed as dist
    import wt
    from conftest import xxh3
    URL, PORT = {url!r}, {port!r}
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    full = {{"embed.weight": torch.randn(50, 16), "proj.weight": torch.randn(16, 24),
            "head.weight": torch.randn(7, 16).bfloat16(), "norm.weight": torch.randn(16)}}

    class Mesh:
        def size(self, mesh_dim):
            return world
        def get_coordinate(self):
            return [rank]

    class Placement:
        def __init__(self, dim):
            self.dim = dim
        def is_shard(self):
            return True

    class Replicate:
        def is_shard(self):
            return False

    class DTensor:  # Shard(dim) over a 1-D mesh of every rank (torch.chunk's split), or replicated
        def __init__(self, t, dim):
            self.shape, self.device_mesh = t.shape, Mesh()
            self.placements = (Placement(dim),) if dim is not None else (Replicate(),)
            self._local = t.chunk(world, dim)[rank] if dim is not None else t
        def to_local(self):
            return self._local

    class ShardedTensor:  # one local shard of rows, ChunkShardingSpec's layout
        def __init__(self, t):
            rows = math.ceil(t.shape[0] / world)
            lo = min(rank * rows, t.shape[0])
            meta = types.SimpleNamespace(shard_offsets=[lo, 0],
                                         shard_sizes=[min(rows, t.shape[0] - lo), t.shape[1]])
            self._shards, self._size = [types.SimpleNamespace(tensor=t[lo:lo + rows],
                                                              metadata=meta)], t.shape
        def local_shards(self):
            return self._shards
        def size(self):
            return self._size

    state = {{"embed.weight": DTensor(full["embed.weight"], 0),
             "proj.weight": DTensor(full["proj.weight"], 1),  # split along columns
             "head.weight": ShardedTensor(full["head.weight"]),
             "norm.weight": DTensor(full["norm.weight"], None)}}  # every rank holds all of it
    engine = wt.trainer_init({{"backend": "m2n", "master_address": "127.0.0.1",
                              "master_port": PORT}}, client=URL, source=state)
    for step in range(2):
        with torch.no_grad():
            for t in full.values():
                t.add_(1)
        engine.send_weights(weight_version=f"step-{{step}}")
    if rank == 0:
        got = wt.HttpClient(URL).weight_checksums()
        want = {{n: xxh3(t) for n, t in full.items()}}
        assert got == want, (got, want)
        print(f"OK: {{world}} ranks, DTensor and ShardedTensor sources byte-exact")
    engine.close()
    dist.destroy_process_group()
""")


def test_dtensor_and_sharded_tensor_sources_need_no_hand_written_shards(serve, tmp_path):
    url = serve("m2n")
    code = ("import sys; sys.path.insert(0, " + repr(str(pathlib.Path(__file__).parent)) + ")\n" +
            FOREIGN.format(url=url, port=free_port()))
    outs = run_ranks(tmp_path, 3, url, code=code)
    for rank, (code_, out) in enumerate(outs):
        assert code_ == 0, f"rank {rank} failed:\n{out}"
    assert "OK: 3 ranks, DTensor and ShardedTensor sources byte-exact" in outs[0][1]


def test_a_sharded_tensor_with_two_local_shards_is_refused_naming_it():
    import types
    from wt import _foreign_shards

    class TwoShards:
        def local_shards(self):
            return [types.SimpleNamespace(), types.SimpleNamespace()]

        def size(self):
            return (4, 4)

    with pytest.raises(wt.InvalidArgument, match=r"tensor 'w' is a ShardedTensor with 2 local "
                                                 r"shards on this rank: wt takes one slice"):
        _foreign_shards.as_shard("w", TwoShards(), wt.Shard)
