"""torch's own sharded tensors as :class:`wt.Shard`: a ``ShardedTensor`` (what FSDP's sharded
state dict holds in torch 1.13) and a ``DTensor`` (FSDP2 and tensor parallelism in later torch)
become the slice this rank holds, so a source of them needs no hand-written ``wt.Shard``.

Both are read through their documented attributes only (``local_shards()``, ``size()`` and each
shard's ``metadata.shard_offsets`` / ``shard_sizes``; ``to_local()``, ``placements``,
``device_mesh`` and ``shape``), never by type: a torch without one of them costs nothing."""

import collections.abc as _abc

from .errors import InvalidArgument


def _is_sharded_tensor(value):
    return callable(getattr(value, "local_shards", None)) and callable(getattr(value, "size", None))


def _is_dtensor(value):
    return (callable(getattr(value, "to_local", None)) and hasattr(value, "placements") and
            hasattr(value, "device_mesh"))


def _is_foreign(value):
    if type(value).__name__ in ("Tensor", "Parameter"):  # the common case, without a lookup
        return False
    return _is_dtensor(value) or _is_sharded_tensor(value)


def _from_sharded_tensor(name, value, shard_type):
    shards = value.local_shards()
    full = tuple(int(d) for d in value.size())
    if len(shards) != 1:
        raise InvalidArgument(
            f"tensor '{name}' is a ShardedTensor with {len(shards)} local shards on this rank: "
            "wt takes one slice per rank (shard it along one dimension, one chunk per rank)",
            field=name)
    shard = shards[0]
    offsets = [int(o) for o in shard.metadata.shard_offsets]
    sizes = [int(s) for s in shard.metadata.shard_sizes]
    cut = [d for d in range(len(full)) if sizes[d] != full[d]]
    if len(cut) > 1:
        raise InvalidArgument(f"tensor '{name}' is a ShardedTensor cut along dimensions {cut}: "
                              "wt takes slices along one dimension", field=name)
    dim = cut[0] if cut else 0
    return shard_type(shard.tensor, full, dim, offsets[dim])


def _from_dtensor(name, value, shard_type):
    full = tuple(int(d) for d in value.shape)
    local = value.to_local()
    split = [(mesh_dim, p.dim) for mesh_dim, p in enumerate(value.placements)
             if callable(getattr(p, "is_shard", None)) and p.is_shard()]
    partial = [p for p in value.placements
               if callable(getattr(p, "is_partial", None)) and p.is_partial()]
    if partial:
        raise InvalidArgument(f"tensor '{name}' is a DTensor with a Partial placement (a sum not "
                              "yet reduced): redistribute it first", field=name)
    if not split:  # replicated: this rank holds all of it
        return local
    if len(split) > 1:
        raise InvalidArgument(f"tensor '{name}' is a DTensor sharded over {len(split)} mesh "
                              "dimensions: wt takes slices along one dimension", field=name)
    mesh_dim, dim = split[0]
    mesh = value.device_mesh
    ranks, at = int(mesh.size(mesh_dim)), int(mesh.get_coordinate()[mesh_dim])
    chunk = -(-full[dim] // ranks)  # torch.chunk's split, which DTensor's Shard uses
    return shard_type(local, full, dim, min(at * chunk, full[dim]))


def as_shard(name, value, shard_type):
    """``value`` as a ``shard_type`` (wt.Shard) when it is one of torch's sharded tensors."""
    if not _is_foreign(value):
        return value
    if _is_dtensor(value):
        return _from_dtensor(name, value, shard_type)
    return _from_sharded_tensor(name, value, shard_type)


class _Converted:
    """A source whose items are read through as_shard each pass."""

    def __init__(self, items, shard_type):
        self._items, self._shard_type = items, shard_type

    def items(self):
        return ((n, as_shard(n, v, self._shard_type)) for n, v in self._items())


def converted(source, shard_type):
    """``source`` with torch's sharded tensors read as ``shard_type``; the same object when it
    holds none (checked once, here: a module's parameters or a dict's values)."""
    if hasattr(source, "named_parameters") and hasattr(source, "state_dict"):
        items = source.named_parameters
    elif isinstance(source, _abc.Mapping):
        items = source.items
    else:
        return source  # pairs and callables: their values are checked as they come (wt.Shard)
    if not any(_is_foreign(v) for _, v in items()):
        return source
    return _Converted(items, shard_type)
