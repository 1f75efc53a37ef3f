"""Every error kind raised from Python with its class and the C++ message intact; a source whose
metadata and iteration disagree; a client that raises in update_weights."""

import pytest
import torch

import wt
from conftest import SilentControl, free_port


def test_the_hierarchy_maps_the_c_codes_and_the_builtins():
    assert issubclass(wt.InvalidArgument, ValueError) and issubclass(wt.Timeout, TimeoutError)
    assert issubclass(wt.NotFound, LookupError)
    for cls, code in [(wt.InvalidArgument, 1), (wt.Incompatible, 2), (wt.Unsupported, 3),
                      (wt.State, 4), (wt.System, 5), (wt.Device, 6), (wt.Timeout, 7),
                      (wt.Aborted, 8), (wt.Remote, 9), (wt.NotFound, 10), (wt.Internal, 11)]:
        assert issubclass(cls, wt.Error) and cls.code == code


def test_invalid_argument_names_the_field():
    with pytest.raises(wt.InvalidArgument) as e:
        wt.trainer_init({"backend": "ipc", "rank": -1}, client=wt.Receiver("ipc"),
                        source={"w": torch.zeros(2)})
    assert str(e.value) == ("init_info: invalid init_info for backend 'ipc': field 'rank' must "
                            "be >= 0")
    assert e.value.field == "rank" and e.value.code_name == "WT_ERR_INVALID_ARGUMENT"


def test_an_unknown_key_and_a_bad_rank_from_the_environment(monkeypatch):
    with pytest.raises(wt.InvalidArgument, match="unknown field 'pakced'"):
        wt.trainer_init({"backend": "ipc", "pakced": True}, client=wt.Receiver("ipc"),
                        source={"w": torch.zeros(2)})
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(wt.InvalidArgument, match="RANK is 'two'"):
        wt.trainer_init({"backend": "ipc"}, client=wt.Receiver("ipc"), source={})


def test_not_found_lists_what_is_there():
    with pytest.raises(wt.NotFound, match=r"no plugin for backend 'nope'.*backends found there: "
                                          r"\[.*ipc.*\]"):
        wt.trainer_init({"backend": "nope"}, client=wt.Receiver("ipc"), source={})


def test_incompatible_patches_to_a_dense_backend():
    engine = wt.trainer_init({"backend": "ipc"}, client=wt.Receiver("ipc"),
                             source={"w": torch.zeros(4)})
    patch = wt.SparsePatch("w", torch.tensor([1], dtype=torch.int32), torch.ones(1), [4])
    with pytest.raises(wt.Incompatible, match=r"full-resync backend \(no WT_CAP_SPARSE\): "
                                              r"send_weights got 1 patch\(es\)"):
        engine.send_weights(patches=[patch])


def test_unsupported_and_state():
    with pytest.raises(wt.Unsupported, match="host memory"):
        wt.Receiver("ipc", device="cuda:0")
    with pytest.raises(wt.InvalidArgument, match="device 'gpu0'"):
        wt.WorkerEngine("ipc", {"packed": False}, device="gpu0")
    worker = wt.WorkerEngine("ipc", {"packed": False})
    with pytest.raises(wt.State):
        worker.receive({"names": []}, lambda n, t: None)


def test_timeout_when_the_workers_never_come():
    info = {"backend": "nccl", "master_address": "127.0.0.1", "master_port": free_port(),
            "world_size": 2, "rendezvous_timeout_s": 1}
    with pytest.raises(wt.Timeout) as e:
        # accepts init but starts no worker: the group cannot form
        wt.trainer_init(info, client=SilentControl(), source={"w": torch.zeros(4)})
    assert isinstance(e.value, TimeoutError)


class Recorder:
    def __init__(self, fail_update=None):
        self.calls, self.fail_update = [], fail_update

    def init_weight_transfer_engine(self, info):
        self.calls.append("init")

    def start_weight_update(self):
        self.calls.append("start")

    def update_weights(self, info):
        self.calls.append("update")
        if self.fail_update:
            raise self.fail_update

    def finish_weight_update(self, weight_version=None):
        self.calls.append(("finish", weight_version))

    def end_weight_update(self, reason):
        self.calls.append("end")


def test_a_client_that_raises_fails_the_round_with_its_message():
    client = Recorder(fail_update=RuntimeError("replica 3 is out of memory"))
    engine = wt.trainer_init({"backend": "ipc"}, client=client, source={"w": torch.zeros(4)})
    with pytest.raises(wt.Remote) as e:
        engine.send_weights(weight_version="v1")
    assert "client.update_weights() raised: RuntimeError: replica 3 is out of memory" in str(e.value)
    assert isinstance(e.value.__cause__, RuntimeError)
    assert ("finish", "v1") not in client.calls and client.calls[:3] == ["init", "start", "update"]


def test_a_client_missing_a_method_is_refused_at_init():
    class Partial:
        def init_weight_transfer_engine(self, info):
            pass

    with pytest.raises(wt.InvalidArgument, match="no method start_weight_update"):
        wt.trainer_init({"backend": "ipc"}, client=Partial(), source={})


def test_a_source_whose_iteration_disagrees_with_its_metadata():
    client = Recorder()
    meta = [("w", "float32", [4]), ("b", "float32", [2])]
    engine = wt.trainer_init({"backend": "ipc"}, client=client,
                             source=lambda: [("w", torch.zeros(4)), ("b", torch.zeros(3))],
                             metadata=meta)
    with pytest.raises(wt.InvalidArgument, match="'b'"):
        engine.send_weights()
    engine = wt.trainer_init({"backend": "ipc"}, client=client,
                             source=lambda: [("b", torch.zeros(2)), ("w", torch.zeros(4))],
                             metadata=meta)
    with pytest.raises(wt.InvalidArgument, match=r"item 0 is 'b' \(float32 \[2\]\) but its "
                                                 r"metadata declares 'w' \(float32 \[4\]\)"):
        engine.send_weights()


def test_a_source_that_raises_or_yields_junk():
    def broken():
        yield "w", torch.zeros(4)
        raise KeyError("shard 7 missing")

    engine = wt.trainer_init({"backend": "ipc"}, client=Recorder(), source=broken,
                             metadata=[("w", "float32", [4]), ("b", "float32", [1])])
    with pytest.raises(wt.InvalidArgument) as e:
        engine.send_weights()
    assert "the source raised at item 1: KeyError: 'shard 7 missing'" in str(e.value)
    assert isinstance(e.value.__cause__, KeyError)
    with pytest.raises(wt.InvalidArgument, match="tensor 'x' of the source is a str, not a tensor"):
        wt.trainer_init({"backend": "ipc"}, client=Recorder(), source=[("x", "zeros")])
    with pytest.raises(wt.InvalidArgument, match="source is a int"):
        wt.trainer_init({"backend": "ipc"}, client=Recorder(), source=3)


def test_every_public_name_has_a_type_stub():
    import ast
    import os
    stub = os.path.join(os.path.dirname(wt.__file__), "__init__.pyi")
    tree = ast.parse(open(stub).read())
    declared = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            declared.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared.add(node.target.id)
        elif isinstance(node, ast.Assign):
            declared.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            declared.update(a.asname or a.name for a in node.names)
    assert set(wt.__all__) - declared == set()


def test_hostile_option_text_is_refused_not_recursed_into():
    deep = "[" * 100000 + "]" * 100000
    with pytest.raises(wt.InvalidArgument, match="options is not usable JSON"):
        wt.WorkerEngine("ipc", {"packed": False}, options=deep)
    with pytest.raises(wt.InvalidArgument, match="options is not usable JSON"):
        wt.Receiver("ipc", options='{"a": ' + deep + "}")
    with pytest.raises(wt.InvalidArgument, match="options must be a JSON object"):
        wt.Receiver("ipc", options="[1]")
    with pytest.raises(wt.InvalidArgument, match="init_info must be a dict"):
        wt.WorkerEngine("ipc", 42)
    with pytest.raises(wt.InvalidArgument):  # the plugin's own bounded parser
        wt.WorkerEngine("ipc", deep)


def test_a_stream_is_a_torch_stream_an_int_or_none_and_anything_else_is_refused(serve):
    url = serve("ipc")
    engine = wt.trainer_init({"backend": "ipc"}, client=url, source={"w": torch.ones(4)})

    class LikeATorchStream:  # what torch.cuda.Stream exposes; host tensors never wait on it
        cuda_stream = 0

    for stream in (None, 0, LikeATorchStream()):
        engine.send_weights(stream=stream)
    with pytest.raises(wt.InvalidArgument, match=r"^stream is a str: pass a torch.cuda.Stream, "
                                                 r"a cudaStream_t as an int \(0: the legacy "
                                                 r"default stream\) or None \(the current "
                                                 r"stream\)$"):
        engine.send_weights(stream="default")
    with pytest.raises(wt.InvalidArgument, match=r"^stream: -1 is not a cudaStream_t$"):
        engine.send_weights(stream=-1)
    engine.close()
    with pytest.raises(wt.InvalidArgument, match=r"^stream: a bool is not a CUDA stream$"):
        wt.WorkerEngine("ipc", {"packed": False}, stream=True)
