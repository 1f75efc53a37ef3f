"""wt's own trainer group from the launcher's variables, for a loop without torch.distributed:
three ranks started as torchrun starts them meet through wt.LauncherGroup (the same authenticated
group `wt launch --rank-from-env` forms) and move their FSDP-style rows into `wt serve` with m2n,
byte-exact. A group with no launcher, on the launcher's own port, or without a secret is refused
naming what to give."""

import os
import pathlib
import secrets
import subprocess
import sys
import textwrap

import pytest

import wt
from conftest import free_port

HERE = pathlib.Path(__file__).resolve().parent

SCRIPT = textwrap.dedent("""
    import math, sys
    sys.path.insert(0, {here!r})
    import torch, wt
    from conftest import xxh3

    group = wt.LauncherGroup(port={group_port})  # RANK, WORLD_SIZE, MASTER_ADDR; WT_TRAINER_SECRET
    rank, world = group.rank(), group.size()
    torch.manual_seed(0)
    full = {{"embed.weight": torch.randn(50, 16), "head.weight": torch.randn(7, 16).bfloat16()}}

    def shard(t):
        rows = math.ceil(t.shape[0] / world)
        lo = min(rank * rows, t.shape[0])
        return wt.Shard(t[lo:lo + rows], t.shape, dim=0, offset=lo)

    engine = wt.trainer_init({{"backend": "m2n", "master_address": "127.0.0.1",
                              "master_port": {port}}}, client={url!r},
                             source={{n: shard(t) for n, t in full.items()}}, group=group)
    for step in range(2):
        for t in full.values():
            t.add_(1)
        engine.send_weights(weight_version=f"step-{{step}}")
    if rank == 0:
        got = wt.HttpClient({url!r}).weight_checksums()
        assert got == {{n: xxh3(t) for n, t in full.items()}}, got
        print(f"OK: {{world}} ranks over {{group!r}}")
    engine.close()
""")


def launcher_env(rank, world, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "WT_TRAINER_SECRET")}
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
               LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT="29499")
    env.update(extra)
    return env


def test_three_ranks_without_torch_distributed_meet_through_the_launchers_variables(serve,
                                                                                    tmp_path):
    url = serve("m2n")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(here=str(HERE), group_port=free_port(), port=free_port(),
                                    url=url))
    secret = secrets.token_hex(32)
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=launcher_env(rank, 3, WT_TRAINER_SECRET=secret))
             for rank in range(3)]
    outs = []
    for p in procs:
        try:
            outs.append((p.communicate(timeout=120)[0], p.returncode))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for rank, (out, code) in enumerate(outs):
        assert code == 0, f"rank {rank} failed:\n{out}"
    assert "OK: 3 ranks over wt.LauncherGroup(rank 0 of 3, meeting at 127.0.0.1:" in outs[0][0]


def test_without_a_launcher_it_says_to_start_under_one(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
                 "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(wt.InvalidArgument, match=r"^wt.LauncherGroup: no cluster launcher's "
                                                 r"variables are set .*leave group= out for a "
                                                 r"single trainer rank$"):
        wt.LauncherGroup()


def test_the_launchers_own_port_and_a_missing_secret_are_refused_naming_the_argument(monkeypatch):
    for k, v in launcher_env(0, 2).items():
        monkeypatch.setenv(k, v)
    with pytest.raises(wt.InvalidArgument, match=r"^wt.LauncherGroup: port is 29499, the "
                                                 r"launcher's MASTER_PORT, which its own store "
                                                 r"holds: give wt another port$"):
        wt.LauncherGroup(port=29499)
    with pytest.raises(wt.InvalidArgument, match=r"the 2 trainer ranks meet over TCP at "
                                                 r"127.0.0.1:\d+ and prove a shared secret to each "
                                                 r"other, but none was given: export "
                                                 r"WT_TRAINER_SECRET=.*point secret_file at"):
        wt.LauncherGroup(port=free_port())


def test_a_world_of_one_needs_no_secret_and_is_one_rank(monkeypatch, serve):
    for k, v in launcher_env(0, 1).items():
        monkeypatch.setenv(k, v)
    group = wt.LauncherGroup()
    assert (group.rank(), group.size(), repr(group)) == (0, 1, "wt.LauncherGroup(rank 0 of 1)")
    import torch
    engine = wt.trainer_init({"backend": "ipc"}, client=serve("ipc"),
                             source={"w": torch.ones(2)}, group=group)
    engine.send_weights()
    engine.close()
