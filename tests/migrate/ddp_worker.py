"""One rank of a torch DistributedDataParallel run with per-group learning rates (groundwork for issue 7 point 3).

Run as ``python -m tests.migrate.ddp_worker OUT_DIR`` under ``dist_harness.run_torch_ddp``; writes
``OUT_DIR/rank{r}.npz`` with every parameter after the last step. The same functions give the one-process run.
"""
import os
import sys
from pathlib import Path

import numpy as np
import torch

BATCH = 4  # samples per rank and step
STEPS = 5


def build_model() -> torch.nn.Sequential:
    """A seeded two-layer MLP (float64, so that the comparison is tight)."""
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()


def make_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    """SGD with momentum and two param groups: the first layer at lr x0.1, the head with no weight decay."""
    groups = [{"params": list(model[0].parameters()), "lr": 0.01},
              {"params": list(model[2].parameters()), "lr": 0.1, "weight_decay": 0.0}]
    return torch.optim.SGD(groups, lr=0.1, momentum=0.9, weight_decay=0.01)


def batch(step: int, rank: int) -> tuple:
    """The data rank `rank` sees at `step` (deterministic)."""
    rng = np.random.RandomState(1000 * step + rank)
    return torch.tensor(rng.randn(BATCH, 3)), torch.tensor(rng.randn(BATCH, 2))


def train(model, optimizer, data, per_step_samples: int) -> dict:
    """STEPS steps of mean squared error over `per_step_samples` samples; returns name -> final value."""
    for step in range(1, STEPS + 1):
        x, y = data(step)
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).sum() / per_step_samples
        loss.backward()
        optimizer.step()
    return {name: p.detach().numpy().copy() for name, p in model.named_parameters()}


def main(out: Path) -> None:
    """Train under DDP (gloo): each rank's loss is the mean of its batch; DDP averages the gradients."""
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(build_model())
    weights = train(model, make_optimizer(model.module), lambda step: batch(step, rank), BATCH)
    np.savez(out / f"rank{rank}.npz", **weights)
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main(Path(sys.argv[1]))
    except BaseException:
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
