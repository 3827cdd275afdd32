"""The exact optimizers on FSDP2-sharded (DTensor) parameters: one rank's run of every case.

Run as ``python -m tests.migrate.optim.dtensor_worker OUT`` under ``devtools.local_cluster.run_torch_ddp`` (gloo, CPU).
For each case of ``CASES`` every rank builds the seeded ``Net`` (float64; its last layer has one output, so on 2 ranks
rank 1 holds empty shards of that weight and bias), shards it with ``fully_shard``, and, on the same batch on every
rank (FSDP2's averaged gradient is then the one-process gradient):

1. asks ``get_state_dict(model, optimizer)`` before any step (torch runs its state-creating step with zero gradients
   and lr 0) and records whether any weight moved or any update count advanced;
2. trains ``STEPS // 2`` steps, takes ``get_state_dict``, records every state tensor shaped like its parameter that is
   not a DTensor with the parameter's placements, and loads both state dicts into a second sharded model and
   optimizer (``set_state_dict``);
3. trains both ``STEPS - STEPS // 2`` more steps.

Rank 0 writes ``OUT/{case}.npz`` (each parameter's full tensor after the last step of the first model) and
``OUT/report.json`` (case -> the problems found: weights moved or counts advanced by the state-creating step, states
that are not DTensors like their parameter, weights of the resumed model that differ from the first's).
:func:`single_process` runs the same steps without sharding (the reference the test compares with).
"""
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

STEPS = 4
BATCH = 8
OPTIONS = {"weight_decay": 0.01, "clip_gradient": 0.5, "rescale_grad": 0.5}
#: case -> (optimizer, its torch arguments beyond OPTIONS, the net has biases). Every exact optimizer.
CASES = {
    "sgd": ("sgd", {"lr": 0.05, "momentum": 0.9}, True),
    "nag": ("nag", {"lr": 0.05, "momentum": 0.9}, True),
    "adam": ("adam", {"lr": 0.01}, True),
    "rmsprop-centered": ("rmsprop", {"lr": 0.01, "centered": True}, True),
    "adagrad": ("adagrad", {"lr": 0.05}, True),
    "adadelta": ("adadelta", {"lr": 1.0}, True),
    "adamax": ("adamax", {"lr": 0.01}, True),
    "nadam": ("nadam", {"lr": 0.01}, True),
    "lamb": ("lamb", {"lr": 0.01}, True),
    "signum": ("signum", {"lr": 0.005, "wd_lh": 0.01}, True),
    "ftrl": ("ftrl", {"lr": 0.1}, True),
    "ftml": ("ftml", {"lr": 0.01}, True),
    "lars": ("lars", {"lr": 0.5, "momentum": 0.9, "eta": 0.1, "eps": 1e-8}, True),
    "lbsgd": ("lbsgd", {"lr": 0.1, "momentum": 0.9, "batch_scale": 2, "warmup_strategy": "lars"}, True),
    "sgld": ("sgld", {"lr": 0.01}, True),
    "dcasgd": ("dcasgd", {"lr": 0.1, "lamda": 0.5}, True),
    "groupadagrad": ("groupadagrad", {"lr": 0.1, "weight_decay": 0.0}, False),
    "test": ("test", {"lr": 0.1}, True),
}


class Net(torch.nn.Module):
    """A seeded float64 MLP 6 -> 5 -> 4 -> 1 (the last layer's weight has one row)."""

    def __init__(self, bias=True):
        super().__init__()
        torch.manual_seed(3)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(i, o, bias=bias) for i, o in ((6, 5), (5, 4), (4, 1)))
        self.double()

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = torch.tanh(layer(x))
        return self.layers[-1](x)


def batch(step):
    """The seeded batch (x, y) of ``step``, float64."""
    generator = torch.Generator().manual_seed(100 + step)
    return (torch.randn(BATCH, 6, generator=generator, dtype=torch.float64),
            torch.randn(BATCH, 1, generator=generator, dtype=torch.float64))


def build_optimizer(case, model):
    """The exact optimizer of ``case`` on two groups (the first layer at half the lr)."""
    from migrate.optim import OPTIMIZERS
    name, kwargs, _ = CASES[case]
    options = dict(OPTIONS, **kwargs)
    if name == "sgld":  # the same noise on every shard: torch.randn_like would draw per rank
        options["noise"] = lambda param, std: torch.full_like(param, 0.01 * std)
    first = list(model.layers[0].parameters())
    rest = [p for layer in model.layers[1:] for p in layer.parameters()]
    groups = [{"params": first, "lr": options["lr"] / 2}, {"params": rest}]
    return OPTIMIZERS[name](groups, **options)


def train(model, optimizer, steps):
    """``steps`` steps of squared error on the seeded batches."""
    for step in steps:
        x, y = batch(step)
        optimizer.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        optimizer.step()


def single_process(case):
    """Each parameter's value (name -> numpy) after STEPS steps of ``case`` in one process, without sharding."""
    model = Net(CASES[case][2])
    train(model, build_optimizer(case, model), range(STEPS))
    return {name: p.detach().numpy().copy() for name, p in model.named_parameters()}


def _sharded(case, mesh):
    from torch.distributed.fsdp import fully_shard
    model = Net(CASES[case][2])
    fully_shard(model, mesh=mesh)
    return model, build_optimizer(case, model)


def _full(model):
    return {name: p.full_tensor().detach().numpy().copy() for name, p in model.named_parameters()}


def _not_like_params(optimizer):
    """Names of state tensors shaped like their parameter that are not DTensors with its placements."""
    from torch.distributed.tensor import DTensor
    wrong = []
    for index, param in enumerate(p for group in optimizer.param_groups for p in group["params"]):
        for key, value in optimizer.state.get(param, {}).items():
            if torch.is_tensor(value) and value.shape == param.shape and not (
                    isinstance(value, DTensor) and value.placements == param.placements):
                wrong.append(f"param {index} {key}: {type(value).__name__}")
    return wrong


def copied(value):
    """``value`` with every tensor cloned (state dicts alias the live tensors; a checkpoint does not)."""
    if torch.is_tensor(value):
        return value.clone()
    if isinstance(value, dict):
        return {key: copied(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(copied(item) for item in value)
    return value


def run_case(case, mesh):
    """(problems found, full parameters after STEPS steps) of ``case`` on sharded parameters."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    problems = []
    model, optimizer = _sharded(case, mesh)
    start = _full(model)
    get_state_dict(model, optimizer)
    moved = [name for name, value in _full(model).items() if not np.array_equal(value, start[name])]
    counts = sorted({s.get("step") for s in optimizer.state.values() if isinstance(s, dict)})
    if moved or counts not in ([0], []):
        problems.append(f"the state-creating step moved {moved} or set update counts {counts}")
    train(model, optimizer, range(STEPS // 2))
    problems += _not_like_params(optimizer)
    model_state, optim_state = copied(get_state_dict(model, optimizer))  # as if read back from a checkpoint
    resumed, resumed_optimizer = _sharded(case, mesh)
    set_state_dict(resumed, resumed_optimizer, model_state_dict=model_state, optim_state_dict=optim_state)
    train(model, optimizer, range(STEPS // 2, STEPS))
    train(resumed, resumed_optimizer, range(STEPS // 2, STEPS))
    final, again = _full(model), _full(resumed)
    problems += [f"resumed {name} differs by {np.abs(again[name] - value).max():.3g}"
                 for name, value in final.items() if not np.array_equal(again[name], value)]
    return problems, final


def main(out):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    dist.init_process_group("gloo")
    try:
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        report = {}
        for case in CASES:
            report[case], final = run_case(case, mesh)
            if dist.get_rank() == 0:
                np.savez(Path(out) / f"{case}.npz", **final)
        if dist.get_rank() == 0:
            (Path(out) / "report.json").write_text(json.dumps(report))
        dist.barrier()
    except BaseException:
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    dist.destroy_process_group()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
