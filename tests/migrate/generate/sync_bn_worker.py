"""One rank of the SyncBatchNorm test: a generated module's BatchNorm layers made synchronized, half of the batch.

Run as ``python -m tests.migrate.generate.sync_bn_worker FOLDER`` under ``devtools.local_cluster.run_torch_ddp`` (2
gloo ranks). ``FOLDER`` holds ``model.py`` (generated), ``weights.pt`` and ``data.npz`` (the whole batch ``x`` and the
output weights ``head``). Rank r converts the model with ``migrate.generate.convert_sync_batchnorm``, runs a
training-mode forward on its half of the batch, backpropagates ``sum(output * head)`` of its half, and writes
``FOLDER/rank{r}.npz``: ``out`` (its half of the output), ``grad:<key>`` (its gradients) and ``state:<key>`` (the
state after the step, running statistics included).
"""
import importlib.util
import os
import sys

import numpy as np
import torch

from devtools import torch_ranks


def main(folder: str) -> None:
    torch.distributed.init_process_group("gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    spec = importlib.util.spec_from_file_location("generated_model", os.path.join(folder, "model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from migrate.generate import convert_sync_batchnorm
    model = [v for v in vars(module).values() if isinstance(v, type) and hasattr(v, "MXNET_NAMES")][0]()
    model.load_state_dict(torch.load(os.path.join(folder, "weights.pt")))
    model = convert_sync_batchnorm(model).train()
    data = np.load(os.path.join(folder, "data.npz"))
    part = slice(rank * len(data["x"]) // world, (rank + 1) * len(data["x"]) // world)
    out = model(torch.from_numpy(data["x"][part]))
    (out * torch.from_numpy(data["head"][part])).sum().backward()
    arrays = {"out": out.detach().numpy()}
    arrays.update({f"grad:{k}": p.grad.numpy() for k, p in model.named_parameters() if p.grad is not None})
    arrays.update({f"state:{k}": v.numpy() for k, v in model.state_dict().items()})
    np.savez(os.path.join(folder, f"rank{rank}.npz"), **arrays)
    torch_ranks.finish()  # both ranks done communicating before either tears its process group down


if __name__ == "__main__":
    torch_ranks.run_rank(main, sys.argv[1])  # exits without the C++ static destructors (see devtools.torch_ranks)
