"""What ``load_migration`` needs under ``torch.distributed``: the block of a tensor each rank holds, the checks of a
sharded model, and one agreement of all ranks on whether the loading failed.

A model sharded with FSDP2 (``torch.distributed.fsdp.fully_shard``) or by hand with DTensors holds on each rank one
block of every parameter. ``held_block`` computes it from the parameter's device mesh and placements: ``Shard(dim)``
cuts a dimension as ``torch.chunk`` does (blocks of ``ceil(size / n)`` along it, the last ones shorter or empty),
``Replicate`` keeps it whole. The migration folder's files are read a block at a time
(``migrate.mapping.stream.TensorFile``), so nothing else of a tensor enters the rank's memory.

Every decision that can stop the loading is made from what the rank holds, before any collective
(``check_sharding``). ``agreement`` then tells every rank whether any of them failed: a rank never waits in a
collective for a rank that raised; all raise, the failing rank its own error, the others ``RankFailedError``.

Examples:
    >>> with agreement("load_migration"):  # every rank enters, every rank raises if one fails
    ...     check_sharding(model)
"""
import contextlib
import math

import torch

from migrate.errors import RankFailedError, ShardingError
from migrate.optim.sharded import dtensor_type, is_dtensor, local

__all__ = ["agreement", "as_held", "check_sharding", "data_parallel_size", "held_block", "held_part",
           "held_state_dict", "state_tensors"]

_MESSAGE_CHARS = 2000
"""The most characters of a failing rank's message that the other ranks repeat."""


def _initialized():
    """``torch.distributed`` when it is built and its default process group is up, else None."""
    import torch.distributed as dist
    return dist if dist.is_available() and dist.is_initialized() else None


def _block(shape, mesh, placements) -> tuple:
    """The slices of a tensor of ``shape`` that this rank holds under ``placements`` on ``mesh`` (``torch.chunk``'s
    cut along each ``Shard`` dimension, mesh dimension by mesh dimension); None when the rank is not in the mesh."""
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        return None
    starts, sizes = [0] * len(shape), list(shape)
    for mesh_dim, placement in enumerate(placements):
        if placement.is_replicate():
            continue
        dim, count = placement.dim % len(shape), mesh.size(mesh_dim)
        chunk = -(-sizes[dim] // count)
        start = min(coordinate[mesh_dim] * chunk, sizes[dim])
        starts[dim], sizes[dim] = starts[dim] + start, min(chunk, sizes[dim] - start)
    return tuple(slice(start, start + size) for start, size in zip(starts, sizes))


def held_block(tensor, shape=None) -> tuple:
    """The block of the whole tensor that this rank holds of ``tensor``: one slice per dimension.

    Args:
        tensor: A DTensor, or a plain tensor (held whole).
        shape: The whole shape to cut as ``tensor`` is cut (an optimizer state of another shape than its parameter,
            each ``Shard`` dimension of the same size); None: ``tensor``'s own.

    Returns:
        A tuple of slices, ``()`` for a plain tensor (the whole).

    Examples:
        >>> held_block(torch.zeros(3, 2))
        ()
    """
    if not is_dtensor(tensor):
        return ()
    return _block(tuple(tensor.shape if shape is None else shape), tensor.device_mesh, tensor.placements)


def held_part(whole, like) -> torch.Tensor:
    """The part of ``whole`` (a plain tensor of the whole shape) that this rank holds of ``like``: a view.

    Examples:
        >>> held_part(torch.arange(4), torch.zeros(4)).tolist()  # a plain ``like`` holds everything
        [0, 1, 2, 3]
    """
    return whole[held_block(like, whole.shape)]


def as_held(part, like, shape=None):
    """``part`` (this rank's block) as a DTensor on ``like``'s mesh with its placements; ``part`` itself when
    ``like`` is a plain tensor. (``migrate.optim.sharded.like_param`` for a part of ``like``'s own shape.)

    Args:
        part: The rank's block, a plain tensor.
        like: The DTensor whose mesh and placements the result takes.
        shape: The whole shape; None: ``like``'s.

    Examples:
        >>> as_held(torch.ones(2), torch.zeros(2)).tolist()
        [1.0, 1.0]
    """
    if not is_dtensor(like):
        return part
    shape = tuple(like.shape if shape is None else shape)
    stride = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
    return dtensor_type().from_local(part, like.device_mesh, like.placements, run_check=False, shape=shape,
                                      stride=stride)


def _cut_like(value, param) -> bool:
    """Whether the optimizer state ``value`` of the sharded ``param`` is cut as ``param`` (each of its ``Shard``
    dimensions present in ``value`` with the parameter's size there)."""
    dims = [p.dim % param.ndim for p in param.placements if p.is_shard()]
    return value.ndim == param.ndim and all(value.shape[d] == param.shape[d] for d in dims)


def state_tensors(state_dict: dict) -> dict:
    """``(parameter id, state name) -> tensor`` of every state tensor of an optimizer ``state_dict``.

    Examples:
        >>> state_tensors({"state": {0: {"step": 3, "mean": torch.zeros(2)}}, "param_groups": []})
        {(0, 'mean'): tensor([0., 0.])}
    """
    return {(i, name): value for i, entry in state_dict["state"].items() for name, value in entry.items()
            if torch.is_tensor(value)}


def held_state_dict(state_dict: dict, optimizer, tensors) -> dict:
    """An optimizer ``state_dict`` with every state tensor read from ``tensors`` into memory of this rank's own: of a
    sharded parameter the block this rank holds (a DTensor with the parameter's mesh and placements), of others the
    whole tensor.

    What ``optimizer.load_state_dict`` takes; nothing returned refers to the file ``tensors`` reads (a memory-mapped
    file can be replaced meanwhile). State tensors cut otherwise than their sharded parameter (scalars) are whole.

    Args:
        state_dict: The saved ``state_dict`` (its tensors are read for their shapes only).
        optimizer: The optimizer it is loaded into, over the same parameters in the same order.
        tensors: ``(parameter id, state name) -> tensor`` read a block at a time
            (``migrate.mapping.stream.TensorFile`` of ``state_tensors``).

    Examples:
        >>> states = TensorFile("optimizer.pt", lambda: state_tensors(torch.load("optimizer.pt", mmap=True)))
        >>> optimizer.load_state_dict(held_state_dict(saved, optimizer, states))  # doctest: +SKIP
    """
    saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
    by_id = dict(zip(saved_ids, (p for group in optimizer.param_groups for p in group["params"])))
    state = {}
    for saved_id, entry in state_dict["state"].items():
        param = by_id.get(saved_id)
        state[saved_id] = {name: _held_value(tensors, (saved_id, name), value, param) for name, value in entry.items()}
    return dict(state_dict, state=state)


def _held_value(tensors, key, value, param):
    """One saved state value as this rank keeps it (see ``held_state_dict``)."""
    if not torch.is_tensor(value):
        return value
    if param is None or not is_dtensor(param) or not _cut_like(value, param):
        return tensors.read(key)
    part = tensors.read(key, held_block(param, value.shape))
    return as_held(part.to(local(param).device), param, value.shape)


def _wrapper_error(model) -> str:
    """The fix for a model given inside a DDP or FSDP1 wrapper, or ''."""
    wrappers = {"DistributedDataParallel": "DistributedDataParallel(model)",
                "FullyShardedDataParallel": "fully_shard(model) (FSDP2; FSDP1's wrapper is not read)"}
    name = type(model).__name__
    if name not in wrappers:
        return ""
    return (f"load_migration(torch_model) is a {name} wrapper; load into the model itself and wrap after: "
            f"optimizer, scheduler = load_migration(folder, model), then {wrappers[name]}")


def _mesh_name(mesh) -> str:
    return f"{mesh.device_type} mesh {mesh.mesh.tolist()}" + (f" {mesh.mesh_dim_names}" if mesh.mesh_dim_names else "")


def check_sharding(model):
    """Check that this rank can load its part of ``model``: every parameter a DTensor on one device mesh with
    ``Shard``/``Replicate`` placements and this rank in the mesh, or none a DTensor.

    Made from what the rank holds alone (no collective): ranks with the same model decide the same.

    Args:
        model: The torch model, sharded (FSDP2's ``fully_shard``, DTensors) or not.

    Returns:
        The device mesh of the parameters, or None for a model that is not sharded.

    Raises:
        ShardingError: the model is a DDP/FSDP1 wrapper, parameters are plain beside sharded ones (their gradients
            would be reduced nowhere), on several meshes (the migrated optimizer is laid out on one, the only layout
            tested), with another placement, or this rank is not in the mesh (it would hold no part of any
            parameter).

    Examples:
        >>> check_sharding(torch.nn.Linear(2, 2)) is None
        True
    """
    wrapped = _wrapper_error(model)
    if wrapped:
        raise ShardingError(wrapped)
    named = dict(model.named_parameters())
    sharded = {name: p for name, p in named.items() if is_dtensor(p)}
    if not sharded:
        return None
    plain = [name for name in named if name not in sharded]
    if plain:
        raise ShardingError(f"load_migration(torch_model): parameters {plain[:8]} ({len(plain)} of {len(named)}) are "
                            f"plain tensors beside {len(sharded)} DTensors: their gradients would be reduced on no "
                            f"rank; shard them too (fully_shard(model) on the root after its blocks)")
    meshes = {}
    for name, param in sharded.items():
        meshes.setdefault(param.device_mesh, []).append(name)
    if len(meshes) > 1:
        listed = "; ".join(f"{_mesh_name(mesh)}: {names[:4]}" for mesh, names in meshes.items())
        raise ShardingError(f"load_migration(torch_model): the parameters lie on {len(meshes)} device meshes "
                            f"({listed}); the migrated optimizer and its state are laid out on one mesh for the "
                            f"whole model: shard every parameter on the same mesh (fully_shard(module, mesh=mesh))")
    _check_placements(sharded, next(iter(meshes)))
    return next(iter(meshes))


def _check_placements(sharded: dict, mesh) -> None:
    """Every placement ``Shard``/``Replicate``, this rank in ``mesh``, every local block ``held_block``'s."""
    from torch.distributed.tensor import Shard
    odd = [f"{name} {tuple(p.placements)}" for name, p in sharded.items()
           if not all(pl.is_replicate() or type(pl) is Shard for pl in p.placements)]
    if odd:
        raise ShardingError(f"load_migration(torch_model): placements other than Shard(dim) and Replicate() on "
                            f"{odd[:4]} ({len(odd)} parameters); shard with fully_shard or distribute_tensor(..., "
                            f"[Shard(0)]), or load before the model is parallelized otherwise")
    if mesh.get_coordinate() is None:
        import torch.distributed as dist
        raise ShardingError(f"load_migration(torch_model): rank {dist.get_rank()} is not in the {_mesh_name(mesh)} "
                            f"of the model's parameters: it would hold no part of any parameter; shard the model on "
                            f"a mesh of every rank that calls load_migration")
    uneven = [f"{name} holds {tuple(p.to_local().shape)}, expected {_sizes(held_block(p))}"
              for name, p in sharded.items() if tuple(p.to_local().shape) != _sizes(held_block(p))]
    if uneven:
        raise ShardingError(f"load_migration(torch_model): local blocks not cut as torch.chunk cuts them: "
                            f"{uneven[:4]}; shard with fully_shard or distribute_tensor")


def _sizes(block: tuple) -> tuple:
    return tuple(s.stop - s.start for s in block)


def data_parallel_size() -> int:
    """The number of ranks of the default process group (1 when ``torch.distributed`` is not initialized).

    Examples:
        >>> data_parallel_size()  # one process
        1
    """
    dist = _initialized()
    return dist.get_world_size() if dist is not None else 1


@contextlib.contextmanager
def agreement(what: str):
    """Run the block on every rank, then tell every rank whether any failed; raise on all if one did.

    The failing rank raises its own error, the others ``RankFailedError`` naming the first failing rank and its
    message. One ``all_gather_object`` over the default group, after the block (its timeout is the group's:
    ``init_process_group(timeout=...)``); nothing when ``torch.distributed`` is not initialized or has one rank.
    Every rank of the job must enter.

    Args:
        what: The call, as the other ranks' message names it.

    Raises:
        RankFailedError: the block failed on another rank.

    Examples:
        >>> with agreement("load_migration"):
        ...     pass
    """
    dist = _initialized()
    if dist is None or dist.get_world_size() == 1:
        yield
        return
    failure = None
    try:
        yield
    except Exception as exc:  # noqa: BLE001 (any failure must reach the other ranks before it is raised)
        failure = exc
    message = None if failure is None else f"{type(failure).__name__}: {str(failure)[:_MESSAGE_CHARS]}"
    reports = [None] * dist.get_world_size()
    dist.all_gather_object(reports, message)
    if failure is not None:
        raise failure
    failed = [(rank, text) for rank, text in enumerate(reports) if text is not None]
    if failed:
        rank, text = failed[0]
        raise RankFailedError(f"{what} failed on rank {rank} of {len(reports)} ({len(failed)} rank(s) failed), so "
                              f"every rank stops here: {text}")
