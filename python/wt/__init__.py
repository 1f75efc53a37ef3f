"""wt: weight transfer for RL post-training, from Python.

Trainer side (the shape of vLLM's trainer API)::

    import wt
    engine = wt.trainer_init({"backend": "nccl", "master_address": "127.0.0.1",
                              "master_port": 29517, "packed": True},
                             client="http://127.0.0.1:8000", source=model)
    engine.send_weights(weight_version="step-1")

Inference side: :class:`WorkerEngine` (a backend's worker, loading into a Python model) and
:class:`Receiver` (the reference receiver, in this process). Errors are :mod:`wt.errors`.
"""

import atexit as _atexit
import collections.abc as _abc
import json as _json
import os as _os
import sys as _sys
import shutil as _shutil
import subprocess as _subprocess
import tempfile as _tempfile
import warnings as _warnings
import weakref as _weakref

from . import _foreign_shards, errors
from ._wt import (EngineSession, HttpClient, LauncherGroup, PinnedSource, Receiver, SparsePatch, WorkerEngine,
                  __version__, add_plugin_directory, make_delta, plugins, search_path)
from ._wt import TrainerEngine as _TrainerEngine
from .errors import (Aborted, Device, Error, Incompatible, Internal, InvalidArgument, NotFound,
                     Remote, State, System, Timeout, Unsupported)

__all__ = [
    "trainer_init", "TrainerEngine", "WorkerEngine", "Receiver", "HttpClient", "SparsePatch", "Shard",
    "PinnedSource", "LauncherGroup", "EngineSession",
    "make_delta", "plugins", "search_path", "add_plugin_directory", "launch", "errors", "Error",
    "InvalidArgument", "Incompatible", "Unsupported", "State", "System", "Device", "Timeout",
    "Aborted", "Remote", "NotFound", "Internal", "__version__",
]

TrainerEngine = _TrainerEngine


class Shard:
    """What this trainer rank holds of one parameter, as FSDP or tensor parallelism shard it:
    ``local`` is the slice ``[offset, offset + local.shape[dim])`` along dimension ``dim`` of a
    tensor whose whole shape is ``full_shape``. Give it as a source's value (in a dict, or as the
    tensor of a (name, value) pair); a backend that moves shards (m2n) sends only the slice, any
    other refuses the source at ``trainer_init``, naming the parameter::

        source = {name: wt.Shard(p.to_local(), p.shape, dim=0, offset=rank * chunk)
                  for name, p in fsdp_model.named_parameters()}
    """

    __slots__ = ("local", "full_shape", "dim", "offset")
    __wt_shard__ = True

    def __init__(self, local, full_shape, dim, offset):
        self.local = local
        self.full_shape = tuple(int(d) for d in full_shape)
        self.dim = int(dim)
        self.offset = int(offset)

    def __repr__(self):
        return (f"wt.Shard(local={tuple(self.local.shape)}, full_shape={self.full_shape}, "
                f"dim={self.dim}, offset={self.offset})")

# Engines still open when the interpreter exits are closed first, while threads can still take
# the GIL (a plugin's threads may need it to finish).
_live = _weakref.WeakSet()


@_atexit.register
def _close_live_engines():
    for engine in list(_live):
        try:
            engine.close()
        except Exception:  # exiting: nothing to report to
            pass


class _TorchGroup:
    """A torch.distributed process group as wt's trainer group: what the backend gathers at init
    (m2n's holdings, rank 0's secrets) goes over the group the training loop already has."""

    def __init__(self, group):
        import torch.distributed as dist
        self._dist = dist
        self._group = group

    def rank(self):
        return self._dist.get_rank(self._group)

    def size(self):
        return self._dist.get_world_size(self._group)

    def all_gather(self, mine):
        out = [None] * self.size()
        self._dist.all_gather_object(out, bytes(mine), group=self._group)
        return out

    def barrier(self):
        self._dist.barrier(group=self._group)

    def __repr__(self):
        return f"wt trainer group over torch.distributed (rank {self.rank()} of {self.size()})"


def _torch_distributed():
    """torch.distributed when torch is imported and a default process group exists, else None."""
    torch = _sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        return dist if dist is not None and dist.is_available() and dist.is_initialized() else None
    except Exception:  # a torch without distributed support
        return None


def _trainer_group(group):
    """The group trainer_init hands the backend: None for one rank."""
    if group is None:
        dist = _torch_distributed()
        if dist is None or dist.get_world_size() == 1:
            return None
        return _TorchGroup(dist.group.WORLD)
    if isinstance(group, LauncherGroup):
        return group if group.size() > 1 else None
    torch = _sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is not None and isinstance(group, getattr(dist, "ProcessGroup", ())):
        return _TorchGroup(group)
    # wt's own form: rank(), size(), all_gather(bytes) -> [bytes by rank], barrier()
    missing = [m for m in ("rank", "size", "all_gather", "barrier")
               if not callable(getattr(group, m, None))]
    if missing:
        raise InvalidArgument(f"group: {group!r} has no {missing[0]}() (a trainer group is a "
                              "torch.distributed process group, or has rank(), size(), "
                              "all_gather(bytes) and barrier())", field="group")
    return group


class _Untied:
    """A mapping source with tied tensors (one tensor under several names, as a state_dict gives
    tied embeddings) read as its first name only, as named_parameters() does."""

    def __init__(self, mapping, skipped):
        self._mapping, self._skipped = mapping, skipped

    def items(self):
        return ((n, t) for n, t in self._mapping.items() if n not in self._skipped)


def _untied(source):
    """`source` with each tied tensor once, under its first name (a warning says which)."""
    if not isinstance(source, _abc.Mapping) or isinstance(source, _Untied):
        return source
    torch = _sys.modules.get("torch")
    if torch is None:
        return source
    first, tied = {}, {}
    for name, t in source.items():
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        key = (t.device, t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))
        if key in first:
            tied[name] = first[key]
        else:
            first[key] = name
    if not tied:
        return source
    _warnings.warn("wt: tied tensors are sent once, under their first name: " +
                   ", ".join(f"'{n}' is '{f}'" for n, f in tied.items()), stacklevel=3)
    return _Untied(source, frozenset(tied))


def trainer_init(init_info, client, source=None, metadata=None, group=None):
    """Creates the trainer engine of ``init_info["backend"]``, loading its plugin on first use.

    ``client``: a URL, a list of URLs (one fan-out over the replicas), a :class:`HttpClient`, a
    :class:`Receiver` in this process, or any object with vLLM's four methods.
    ``source`` (full-resync backends): an ``nn.Module`` (its ``named_parameters()``), a dict
    name -> tensor, an iterable of (name, tensor), or a callable returning one each round.
    ``metadata``: for a callable source, what it yields — pairs, a dict of tensors, or
    (name, dtype, shape) triples; without it the callable is called once at init to read it.
    ``group``: the trainer ranks, when several run this call (m2n: each sends its own shards;
    nccl: rank 0 sends): a ``torch.distributed`` process group, a :class:`LauncherGroup` (wt's
    own, from the launcher's variables), or any object with ``rank()``, ``size()``,
    ``all_gather(bytes)`` and ``barrier()``. Without it, torch.distributed's default
    group once ``init_process_group`` has run, else one rank. The init info's ``rank`` is the
    group's rank; one that disagrees is refused.
    ``world_size``, when the init info needs one and has none, is 1 + the worker ranks behind
    ``client`` (each receiver's ``/get_world_size``), as ``wt launch`` counts it.
    """
    if isinstance(init_info, str):
        init_info = _json.loads(init_info)
    info = dict(init_info)
    trainers = _trainer_group(group)
    if trainers is not None:
        rank, size = trainers.rank(), trainers.size()
        if "rank" in info and info["rank"] != rank:
            raise InvalidArgument(f"init_info rank is {info['rank']!r}, but this process is rank "
                                  f"{rank} of its trainer group of {size}", field="rank")
        info["rank"] = rank
    elif "rank" not in info:
        # One trainer rank. A launcher's RANK saying otherwise, with no group to meet the others,
        # would make this rank wait for, or skip, what rank 0 does: refused, saying what to pass.
        env_rank, env_size = _os.environ.get("RANK"), _os.environ.get("WORLD_SIZE")
        try:
            rank = int(env_rank or 0)
            size = int(env_size or 1)
        except ValueError:
            bad = "RANK" if not (env_rank or "0").lstrip("-").isdigit() else "WORLD_SIZE"
            raise InvalidArgument(f"environment variable {bad} is {_os.environ[bad]!r}, "
                                  "not an integer", field="rank") from None
        if rank != 0 or size > 1:
            raise InvalidArgument(
                f"the environment says RANK={rank}, WORLD_SIZE={size} (a launcher's), but this "
                "process has no trainer group to meet the other ranks: call "
                "torch.distributed.init_process_group() first, or pass group= (a process group), "
                "or give init_info['rank'] for a single trainer rank", field="rank")
        info["rank"] = 0
    source = _foreign_shards.converted(_untied(source), Shard)
    engine = _TrainerEngine(info, client, source, metadata, trainers)
    _live.add(engine)
    return engine


def _cli():
    here = _os.path.dirname(_os.path.abspath(__file__))
    for candidate in (_os.environ.get("WT_CLI", ""),
                      _os.path.join(here, "bin", "wt"),                        # the wheel
                      _os.path.join(here, "..", "..", "bin", "wt"),            # build/python/wt
                      _os.path.join(here, "..", "..", "..", "..", "bin", "wt")):  # an install
        if candidate and _os.access(candidate, _os.X_OK):
            return candidate
    found = _shutil.which("wt")
    if found:
        return found
    raise Unsupported("the wt command-line tool was not found (next to the package, on PATH, "
                      "or as $WT_CLI): wt.launch runs it")


def launch(config, timeout_s=None):
    """Runs a ``wt launch`` config (a path, or a dict in the YAML's form) and returns its JSON
    report. A failed run raises :class:`Error` with the report's message."""
    with _tempfile.TemporaryDirectory(prefix="wt-launch-") as tmp:
        path = config
        if isinstance(config, dict):
            path = _os.path.join(tmp, "launch.yaml")
            with open(path, "w") as f:
                _json.dump(config, f)  # JSON is YAML
        run = _subprocess.run([_cli(), "launch", "--json", str(path)], capture_output=True,
                              text=True, timeout=timeout_s)
    try:
        report = _json.loads(run.stdout)
    except ValueError:
        raise Error(f"wt launch {path} failed (exit {run.returncode}): "
                    f"{(run.stderr or run.stdout).strip()}") from None
    if run.returncode != 0 or not (isinstance(report, dict) and report.get("ok")):
        errors = report.get("errors") if isinstance(report, dict) else None
        detail = "; ".join(str(e) for e in errors) if errors else (run.stderr or "").strip()
        raise Error(f"wt launch {path} failed (exit {run.returncode}): {detail}")
    return report
