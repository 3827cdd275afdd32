"""Audit: how far each exact optimizer's torch result is from MXNet 1.9.1's own update, and which bits changed between
two trees.

Run: ``OMP_NUM_THREADS=2 PYTHONPATH=$PWD .venv/bin/python bench/bench_optim_exactness.py [--save out.npz]
[--against other.npz]``; ``PYTHONPATH`` picks the tree whose ``migrate`` is audited (copy this script and
``tests/migrate/optim/test_lbsgd_sgld_dcasgd_groupadagrad.py`` into an older tree).

Three sections, every row in float32 and float64:

- ``mlp``: ``tests/migrate/optim/test_trajectories.py``'s runs: the seeded MLP, 100 LrTrainer steps with lr_mult and
  wd_mult groups, a frozen layer, wd, clipping, ``rescale_grad`` and a schedule, then the same in torch;
- ``mlp8``: ``tests/migrate/optim/test_lbsgd_sgld_dcasgd_groupadagrad.py``'s runs (8 steps; sgld fed MXNet's noise);
- ``big``: the optimizers alone (MXNet and torch given the same gradients) on the compiled kernels' ground: every
  optimizer of ``mlp`` and ``mlp8`` on 2-D tensors of 70221, 12361, 4096, 1000 and 7 elements (cut into shares for
  ``torch.set_num_threads(2)``, into LAMB's blocks), 10 LrTrainer steps of seeded gradients (lr_mult 0.5 and 2.0,
  wd_mult 0 on one, wd, clipping, ``rescale_grad`` 1/4, a schedule; sgld drawing MXNet's noise in both runs).

Prints per row the largest absolute difference between the torch weights and MXNet's and whether they are equal bit
for bit; with ``--against`` (a ``--save`` file of another tree) also the largest difference between the two trees'
torch weights (0: no bit changed).
"""
import argparse
import os

import mxnet as mx
import numpy as np
import torch
from mxnet import autograd, gluon

import migrate
from tests.migrate import _mx_reference as R
from tests.migrate.optim import test_lbsgd_sgld_dcasgd_groupadagrad as L

MLP8 = {
    "lbsgd": ("lbsgd", dict(L.LBSGD, warmup_strategy="lars"), {}),
    "dcasgd": ("dcasgd", {"learning_rate": 0.1, "lamda": 0.5}, {}),
    "groupadagrad": ("groupadagrad", {"learning_rate": 0.1}, {"two_d_only": True, "wd": 0.0}),
    "sgld": ("sgld", {"learning_rate": 0.01}, {"noise_seed": 11}),
    "test": ("test", {"learning_rate": 0.1}, {"steps": 3}),
}
#: 2-D (groupadagrad's rows), 70k elements in all: cut into shares for 2 threads, into LAMB's blocks
BIG_SHAPES = ((263, 267), (47, 263), (64, 64), (25, 40), (1, 7))
BIG_STEPS, BIG_BATCH = 10, 4
#: lr_mult, wd_mult of each big tensor
BIG_MULTS = ((1.0, 1.0), (0.5, 1.0), (2.0, 0.0), (1.0, 1.0), (1.0, 1.0))


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


class _Holder(gluon.Block):
    """Parameters of BIG_SHAPES, seeded (no forward: the loss is built from their data)."""

    def __init__(self, dtype):
        super().__init__(prefix="big_")
        for i, shape in enumerate(BIG_SHAPES):
            param = self.params.get(f"p{i}", shape=shape, dtype=dtype)
            param.lr_mult, param.wd_mult = BIG_MULTS[i]
        self.initialize()
        rng = np.random.RandomState(5)
        for param in self.params.values():
            param.set_data(mx.nd.array(rng.randn(*param.shape), dtype=dtype))


def big_kwargs(case):
    """(MXNet optimizer name, its kwargs with wd and clipping, schedule) of a big row."""
    if case in MLP8:
        name, opt_kwargs, extra = MLP8[case]
        kwargs = dict(opt_kwargs, wd=extra.get("wd", 0.01), clip_gradient=0.5)
        return name, kwargs, dict(L.SCHEDULE, base_lr=kwargs["learning_rate"])
    name, opt_kwargs = {c: (n, k) for c, n, k in R.CASES}[case]
    return (name, *R.case_kwargs(opt_kwargs))


def big_row(case, dtype):
    """(torch weights, largest difference to MXNet) of ``case`` on BIG_SHAPES given the same gradients (the
    optimizers alone), ``torch.set_num_threads(2)``."""
    name, kwargs, schedule = big_kwargs(case)
    holder = _Holder(dtype)
    params = list(holder.collect_params().values())
    model = torch.nn.ParameterList([torch.nn.Parameter(torch.from_numpy(p.data().asnumpy().copy())) for p in params])
    trainer = R.mx_trainer(holder, name, kwargs, schedule)
    settings = R.exported_settings(trainer)
    rng = np.random.RandomState(9)
    grads = [[rng.randn(*shape).astype(dtype) for shape in BIG_SHAPES] for _ in range(BIG_STEPS)]
    mx.random.seed(11)  # sgld's noise: MXNet's samples in MXNet's order, drawn again for torch below
    for step in grads:
        with autograd.record():
            loss = sum((p.data() * mx.nd.array(g, dtype=dtype)).sum() for p, g in zip(params, step))
        loss.backward()
        trainer.step(BIG_BATCH)
    mapping = {param.name: str(i) for i, param in enumerate(params)}
    optimizer = migrate.torch_optimizer(model, settings, mapping, rescale_grad=1 / BIG_BATCH)
    optimizer.noise = L.mx_noise(11)
    scheduler = migrate.torch_lr_scheduler(optimizer, settings, num_update=0)
    for step in grads:
        for param, grad in zip(model, step):
            param.grad = torch.from_numpy(grad.copy())
        optimizer.step()
        scheduler.step()
    worst = max(float(np.abs(p.data().asnumpy() - t.detach().numpy()).max()) for p, t in zip(params, model))
    return _weights(model), worst


def _weights(model):
    return [p.detach().numpy().copy() for p in model.parameters()]


def rows():
    """(section, case, function) of every row."""
    out = [("mlp", case, mlp_row) for case, _, _ in R.CASES]
    out += [("mlp8", case, mlp8_row) for case in MLP8]
    return out + [("big", case, big_row) for case in [c for c, _, _ in R.CASES] + list(MLP8)]


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
