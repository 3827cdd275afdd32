"""Audit: how far each exact optimizer's torch result is from MXNet 1.9.1's own update, and which bits changed between
two trees.

Run: ``OMP_NUM_THREADS=2 PYTHONPATH=$PWD .venv/bin/python bench/bench_optim_exactness.py [--save out.npz]
[--against other.npz]``; ``PYTHONPATH`` picks the tree whose ``migrate`` is audited (copy this script,
``tests/migrate/optim/same_gradients.py`` and ``test_lbsgd_sgld_dcasgd_groupadagrad.py`` into an older tree).

Three sections, every row in float32 and float64:

- ``mlp``: ``tests/migrate/optim/test_trajectories.py``'s runs: the seeded MLP, 100 LrTrainer steps with lr_mult and
  wd_mult groups, a frozen layer, wd, clipping, ``rescale_grad`` and a schedule, then the same in torch;
- ``mlp8``: ``tests/migrate/optim/test_lbsgd_sgld_dcasgd_groupadagrad.py``'s runs (8 steps; sgld fed MXNet's noise);
- ``big``: the optimizers alone (MXNet and torch given the same gradients) on the compiled kernels' ground: every
  optimizer of ``mlp`` and ``mlp8``, 30 steps of ``tests/migrate/optim/same_gradients.py`` (88k elements cut into
  shares for 2 threads and into LAMB's blocks, lr_mult and wd_mult groups, wd, clipping, ``rescale_grad``, the lr
  halved every 2 updates; sgld drawing MXNet's noise in both runs).

Prints per row the largest absolute difference between the torch weights and MXNet's and whether they are equal bit
for bit; with ``--against`` (a ``--save`` file of another tree) also the largest difference between the two trees'
torch weights (0: no bit changed).
"""
import argparse
import os

import numpy as np
import torch

import migrate
from tests.migrate import _mx_reference as R
from tests.migrate.optim import same_gradients
from tests.migrate.optim import test_lbsgd_sgld_dcasgd_groupadagrad as L

MLP8 = {
    "lbsgd": ("lbsgd", dict(L.LBSGD, warmup_strategy="lars"), {}),
    "dcasgd": ("dcasgd", {"learning_rate": 0.1, "lamda": 0.5}, {}),
    "groupadagrad": ("groupadagrad", {"learning_rate": 0.1}, {"two_d_only": True, "wd": 0.0}),
    "sgld": ("sgld", {"learning_rate": 0.01}, {"noise_seed": 11}),
    "test": ("test", {"learning_rate": 0.1}, {"steps": 3}),
}
BIG_STEPS = 30


def mlp_row(case, dtype):
    """(torch weights, largest difference to MXNet) of test_trajectories' run of ``case`` (MXNet and torch compute
    their own gradients: float rounding of the forward and backward passes takes part)."""
    ref = R.mx_reference(case, dtype)
    model = R.torch_model(ref["initial"])
    optimizer = migrate.torch_optimizer(model, ref["settings"], R.MAPPING)
    R.torch_train(model, optimizer, migrate.torch_lr_scheduler(optimizer, ref["settings"], num_update=0), ref["data"])
    return _weights(model), R.largest_difference(ref["final"], model)[1]


def mlp8_row(case, dtype):
    """(torch weights, largest difference to MXNet) of the lbsgd/sgld/dcasgd/groupadagrad/test runs."""
    name, kwargs, extra = MLP8[case]
    expected, model = L.mxnet_and_torch(name, kwargs, dtype, **extra)
    return _weights(model), R.largest_difference(expected, model)[1]


def big_row(case, dtype):
    """(torch weights, largest difference to MXNet) of ``case`` given MXNet's gradients (``same_gradients.run``)."""
    expected, weights = same_gradients.run(case, dtype, BIG_STEPS)
    return weights, max(float(np.abs(e - w).max()) for e, w in zip(expected, weights))


def _weights(model):
    return [p.detach().numpy().copy() for p in model.parameters()]


def rows():
    """(section, case, function) of every row."""
    out = [("mlp", case, mlp_row) for case, _, _ in R.CASES]
    out += [("mlp8", case, mlp8_row) for case in MLP8]
    return out + [("big", case, big_row) for case in same_gradients.CASES]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", help="write every row's torch weights to this .npz")
    parser.add_argument("--against", help="a --save file of another tree: print how far its weights are")
    parser.add_argument("--only", nargs="*", default=None, help="cases to run")
    args = parser.parse_args()
    torch.set_num_threads(2)
    other = dict(np.load(args.against)) if args.against else {}
    saved = {}
    print(f"{'section':<8}{'case':<18}{'dtype':<9}{'max |torch-MXNet|':>18}{'bit-exact':>10}"
          f"{'max |this-other|':>18}")
    for section, case, function in rows():
        if args.only and case not in args.only:
            continue
        for dtype in ("float32", "float64"):
            weights, worst = function(case, dtype)
            key = f"{section}/{case}/{dtype}"
            for i, w in enumerate(weights):
                saved[f"{key}/{i}"] = w
            versus = ""
            if f"{key}/0" in other:
                versus = f"{max(float(np.abs(w - other[f'{key}/{i}']).max()) for i, w in enumerate(weights)):.3g}"
            print(f"{section:<8}{case:<18}{dtype:<9}{worst:>18.3g}{'yes' if worst == 0 else 'no':>10}{versus:>18}",
                  flush=True)
    if args.save:
        np.savez(args.save, **saved)
    print(f"tree: {os.path.dirname(os.path.dirname(migrate.__file__))}")


if __name__ == "__main__":
    main()
