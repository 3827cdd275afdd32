"""Continue a migrated MXNet run with FSDP2 on several ranks: the torch script of tutorial 9 (no MXNet needed).

Run: ``torchrun --standalone --nproc-per-node 2 tutorials/fsdp_recipe.py MIGRATED DATA.npz OUT``. ``MIGRATED`` is the
folder of ``migrate all --torch generate``; ``DATA.npz`` holds the batches (``x0``, ``y0``, ``x1``, ...), each rank
training on its half of every batch as each MXNet device did. Rank 0 prints each step's loss (the mean over the whole
batch) and writes ``OUT`` (the whole weights after the last step, by torch key).
"""
import importlib.util
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

import migrate


def generated_model(folder: str) -> torch.nn.Module:
    """An instance of the class ``migrate all --torch generate`` wrote to ``folder/model.py`` (named ``Net`` after
    ``net-symbol.json``)."""
    spec = importlib.util.spec_from_file_location("model", os.path.join(folder, "model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Net()


def main(migrated: str, data: str, out: str) -> None:
    dist.init_process_group("gloo")  # "nccl" on GPUs (with torch.cuda.set_device(local rank) first)
    rank, world = dist.get_rank(), dist.get_world_size()
    model = generated_model(migrated)
    fully_shard(model)  # FSDP2: every parameter a DTensor; this rank holds 1/world of each
    optimizer, scheduler = migrate.load_migration(migrated, model)  # reads this rank's blocks only
    held = [None] * world
    dist.all_gather_object(held, sum(p.to_local().numel() for p in model.parameters()))
    if rank == 0:
        print(f"the ranks hold {held} of {sum(p.numel() for p in model.parameters())} parameter elements; "
              f"gradient scale {optimizer.param_groups[0]['rescale_grad']:g}", flush=True)
    batches = np.load(data)
    model.train()
    for step in range(len(batches.files) // 2):
        x, y = (torch.from_numpy(np.array_split(batches[f"{v}{step}"], world)[rank]) for v in "xy")
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y.long(), reduction="sum")  # summed, as MXNet's
        loss.backward()
        optimizer.step()
        scheduler.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if rank == 0:
            print(f"step {step + 1}: loss {total.item() / len(batches[f'y{step}']):.6f}", flush=True)
    weights = {key: value.full_tensor().numpy() for key, value in model.state_dict().items() if key in
               dict(model.named_parameters())}  # full_tensor gathers: every rank calls it
    if rank == 0:
        np.savez(out, **weights)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
    # Leave without the C++ static destructors: torch's gloo threads can still be joinable when they run (seen under
    # CPU load, after destroy_process_group), and std::terminate would then abort a rank whose work is done and saved.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
