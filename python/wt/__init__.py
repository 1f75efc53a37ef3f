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
import json as _json
import os as _os
import shutil as _shutil
import subprocess as _subprocess
import tempfile as _tempfile
import weakref as _weakref

from . import errors
from ._wt import (HttpClient, PinnedSource, Receiver, SparsePatch, WorkerEngine, __version__,
                  add_plugin_directory, make_delta, plugins, search_path)
from ._wt import TrainerEngine as _TrainerEngine
from .errors import (Aborted, Device, Error, Incompatible, Internal, InvalidArgument, NotFound,
                     Remote, State, System, Timeout, Unsupported)

__all__ = [
    "trainer_init", "TrainerEngine", "WorkerEngine", "Receiver", "HttpClient", "SparsePatch", "Shard",
    "PinnedSource",
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


def trainer_init(init_info, client, source=None, metadata=None):
    """Creates the trainer engine of ``init_info["backend"]``, loading its plugin on first use.

    ``client``: a URL, a list of URLs (one fan-out over the replicas), a :class:`HttpClient`, a
    :class:`Receiver` in this process, or any object with vLLM's four methods.
    ``source`` (full-resync backends): an ``nn.Module`` (its ``named_parameters()``), a dict
    name -> tensor, an iterable of (name, tensor), or a callable returning one each round.
    ``metadata``: for a callable source, what it yields — pairs, a dict of tensors, or
    (name, dtype, shape) triples; without it the callable is called once at init to read it.
    ``rank`` defaults to ``$RANK`` (what launchers set), else 0, when the init info has none.
    """
    if isinstance(init_info, str):
        init_info = _json.loads(init_info)
    info = dict(init_info)
    if "rank" not in info:
        try:
            info["rank"] = int(_os.environ.get("RANK") or 0)
        except ValueError:
            raise InvalidArgument(f"environment variable RANK is {_os.environ['RANK']!r}, "
                                  "not an integer", field="rank") from None
    engine = _TrainerEngine(info, client, source, metadata)
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
