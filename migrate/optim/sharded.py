"""DTensor parameters (FSDP2's ``fully_shard``): each rank's local shard, state shaped like the parameter, and the
per-tensor sums of squares added over the ranks.

The exact optimizers update a DTensor parameter through its local tensor (``to_local()``, a view of the rank's
shard, so the update writes the parameter); their state buffers are DTensors with the parameter's mesh and
placements (made by ``torch.zeros_like(param)`` and the like), so ``optimizer.state_dict()`` holds DTensors as
``torch.distributed.checkpoint`` expects. Whole-tensor reductions (LAMB's and LARS's norms, LBSGD's LARS warmup) add
each rank's partial sum over the mesh dimensions the parameter is sharded on (``mesh_sums``), so every rank uses the
norm of the whole tensor. A rank may hold an empty shard of a small tensor (``Shard(0)`` of a 1-row weight on 2
ranks): its local tensor has no elements and it still takes part in the sums.

Examples:
    >>> local(param).add_(1.0)  # doctest: +SKIP  (writes the rank's shard of a DTensor parameter)
"""
import sys

import torch

__all__ = ["dtensor_type", "is_dtensor", "like_param", "local", "mesh_sums"]


def dtensor_type():
    """torch's ``DTensor`` class once ``torch.distributed.tensor`` is imported (no DTensor exists before), else None."""
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None)


def is_dtensor(tensor) -> bool:
    """Whether ``tensor`` is a DTensor (a parameter or buffer sharded or replicated over a device mesh)."""
    kind = dtensor_type()
    return kind is not None and isinstance(tensor, kind)


def local(tensor):
    """The rank's local tensor of a DTensor (a view: writing it writes the DTensor), else ``tensor`` itself."""
    return tensor.to_local() if is_dtensor(tensor) else tensor


def like_param(tensor: torch.Tensor, param) -> torch.Tensor:
    """``tensor``, a rank's local tensor shaped as ``param``'s local shard, as a DTensor with ``param``'s mesh and
    placements (``param`` a DTensor)."""
    return dtensor_type().from_local(tensor, param.device_mesh, param.placements, run_check=False,
                                     shape=param.shape, stride=param.stride())


def _sharded_dims(param) -> tuple:
    """The mesh dimensions ``param`` is sharded on (Replicate dims hold the whole tensor); Partial is refused."""
    dims = []
    for dim, placement in enumerate(param.placements):
        if placement.is_partial():
            raise TypeError(f"a DTensor parameter with a Partial placement {param.placements} has no local values to "
                            f"update; redistribute it to Shard or Replicate before the optimizer step")
        if placement.is_shard():
            dims.append(dim)
    return tuple(dims)


def mesh_sums(sums: list, params: list) -> list:
    """Each per-tensor partial sum (of the local shard of ``params[i]``) added over the ranks that share the tensor.

    Plain tensors keep their sum; DTensor parameters sharded on a mesh (the same parameters in the same order on
    every rank, as an optimizer step has them) take one float64 all-reduce per mesh dimension for all of them.

    Args:
        sums: Python floats (or numpy scalars), one per parameter.
        params: The parameters (or tensors) the sums were taken over, in the same order.

    Returns:
        A list of python floats.
    """
    out = [float(value) for value in sums]
    by_mesh = {}
    for position, param in enumerate(params):
        if is_dtensor(param) and _sharded_dims(param):
            key = (id(param.device_mesh), _sharded_dims(param))
            by_mesh.setdefault(key, (param, []))[1].append(position)
    for param, positions in by_mesh.values():
        totals = torch.tensor([out[i] for i in positions], dtype=torch.float64, device=local(param).device)
        for dim in _sharded_dims(param):
            torch.distributed.all_reduce(totals, group=param.device_mesh.get_group(dim))
        for position, total in zip(positions, totals.tolist()):
            out[position] = total
    return out
