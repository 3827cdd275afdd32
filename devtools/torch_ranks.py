"""The rank side of the torch.distributed jobs that ``devtools.local_cluster.run_torch_ddp`` starts (tests and benches).

A rank sets up gloo with a deadline on every collective (``init_gloo``), wraps or shards its model (``parallel``:
``DistributedDataParallel`` or FSDP2's ``fully_shard``), reports whole weights (``whole_weights``: DTensors gathered),
and ends through ``run_rank``, which neither hangs nor aborts: a failing rank prints its traceback and exits with 1 at
once (a Python exception alone can leave it waiting in a collective), and a rank that succeeded skips the C++ static
destructors (under CPU load torch's gloo threads can still be joinable when they run, and std::terminate would abort
a rank whose results are written).
"""
import datetime
import os
import sys

import numpy as np

#: Seconds any collective may wait before it fails (the job's deadline in ``run_torch_ddp`` is longer).
COLLECTIVE_TIMEOUT = 60.0


def init_gloo(timeout: float = COLLECTIVE_TIMEOUT) -> tuple:
    """``init_process_group("gloo")`` from the environment ``run_torch_ddp`` sets, every collective bounded by
    ``timeout`` seconds; returns ``(rank, world_size)``."""
    import torch.distributed as dist
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    return dist.get_rank(), dist.get_world_size()


def finish() -> None:
    """Wait for every rank to be done communicating, then tear the process group down."""
    import torch.distributed as dist
    dist.barrier()
    dist.destroy_process_group()


def parallel(model, mode: str):
    """``model`` as the job trains it: ``"ddp"`` wraps it (each rank keeps its own BatchNorm statistics, as each
    MXNet device does), ``"fsdp"`` shards it in place (``fully_shard`` on the root: every parameter a DTensor),
    ``"single"`` leaves it alone."""
    import torch
    if mode == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard
        fully_shard(model)
    return model


def whole_weights(model) -> dict:
    """torch key -> numpy copy of every parameter and buffer, DTensors gathered whole (a collective: every rank of the
    mesh must call it)."""
    module = getattr(model, "module", model)
    out = {}
    for key, value in module.state_dict().items():
        whole = value.full_tensor() if hasattr(value, "full_tensor") else value
        out[key] = whole.detach().cpu().numpy().copy()
    return out


def rank_slice(array: np.ndarray, rank: int, world: int) -> np.ndarray:
    """Rank ``rank``'s contiguous share of the first dimension of ``array`` among ``world`` ranks (MXNet's
    ``split_and_load`` of a batch divisible by the device count)."""
    size = len(array) // world
    return array[rank * size:(rank + 1) * size]


def run_rank(main, *args) -> None:
    """Run ``main(*args)`` and exit the process: 0 after it returns, 1 (traceback printed) after it raises."""
    try:
        main(*args)
    except BaseException:
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
