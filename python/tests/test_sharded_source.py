"""A Python source that holds only slices (wt.Shard): the metadata carries the full shape and the
slice, a backend that moves shards (m2n) syncs it into `wt serve` byte-exact, and every other
backend, or a slice that leaves part of a tensor to nobody, is refused at trainer_init."""

import pytest
import torch

import wt
from conftest import free_port, xxh3


def tensors():
    torch.manual_seed(0)
    return {"embed.weight": torch.randn(64, 16),
            "proj.weight": torch.randn(24, 16).to(torch.bfloat16), "norm.bias": torch.randn(16)}


def m2n_info(workers=1):
    return {"backend": "m2n", "master_address": "127.0.0.1", "master_port": free_port(),
            "world_size": 1 + workers, "rendezvous_timeout_s": 20, "transfer_timeout_s": 20}


def test_m2n_takes_the_ranks_slices_and_the_receiver_holds_the_full_tensors(serve):
    url = serve("m2n")
    full = tensors()
    # One trainer rank holding all of each tensor, declared as a slice of it (dim 0, offset 0):
    # the shard fields travel, and the plan covers every row from this rank's slices.
    source = {n: wt.Shard(t, t.shape, dim=0, offset=0) for n, t in full.items()}
    engine = wt.trainer_init(m2n_info(), client=url, source=source)
    for step in range(2):
        for t in full.values():
            t.add_(1)
        engine.send_weights(weight_version=f"step-{step}")
        assert wt.HttpClient(url).weight_checksums() == {n: xxh3(t) for n, t in full.items()}
    engine.close()


def test_a_slice_no_rank_completes_is_refused_at_init_naming_the_tensor(serve):
    url = serve("m2n")
    full = tensors()
    source = dict(full)
    source["embed.weight"] = wt.Shard(full["embed.weight"][:32], (64, 16), dim=0, offset=0)
    with pytest.raises(wt.InvalidArgument,
                       match="no trainer rank holds elements 32..64 of dim 0 of parameter "
                             "'embed.weight'"):
        wt.trainer_init(m2n_info(), client=url, source=source)


def test_a_backend_that_does_not_move_slices_refuses_them(serve):
    url = serve("nccl")
    full = tensors()
    source = {n: wt.Shard(t[:8], t.shape, dim=0, offset=8) for n, t in full.items()}
    info = {"backend": "nccl", "master_address": "127.0.0.1", "master_port": free_port(),
            "world_size": 2}
    with pytest.raises(wt.Error, match="does not take sharded sources"):
        wt.trainer_init(info, client=url, source=source)


def test_a_shard_that_does_not_fit_its_full_shape_is_refused():
    t = torch.zeros(4, 4)
    with pytest.raises(wt.InvalidArgument, match="dim 2 is not a dimension of its full shape"):
        wt.trainer_init({"backend": "m2n", "master_address": "127.0.0.1", "master_port": 1,
                         "world_size": 2}, client="http://127.0.0.1:1",
                        source={"w": wt.Shard(t, (4, 4), dim=2, offset=0)})
    with pytest.raises(wt.InvalidArgument,
                       match=r"slice of 'w' \(\[2, 6\) along dimension 0\) is not inside its size 4"):
        wt.trainer_init({"backend": "m2n", "master_address": "127.0.0.1", "master_port": 1,
                         "world_size": 2}, client="http://127.0.0.1:1",
                        source={"w": wt.Shard(t, (4, 4), dim=0, offset=2)})  # rows 2..6 of 4
