"""Runs of the exact optimizers against MXNet 1.9.1 given the same gradients: the optimizers alone, on tensors the
compiled kernels cut into shares for 2 threads and into blocks.

MXNet trains a Gluon ``Block`` of SHAPES (88k elements; lr_mult 0.5 and 2.0, wd_mult 0 on one) with ``LrTrainer``
(wd, clipping, ``rescale_grad`` 1/4, the lr halved every 2 updates) on seeded gradients (the loss
``sum(w * g)``, whose gradient is ``g`` exactly); migrate's exact optimizer, built from the exported settings, then
steps a torch copy on the same gradients under ``torch.set_num_threads(2)``. SGLD draws MXNet's own noise in both
runs. Shared by ``test_same_gradients.py`` and ``bench/bench_optim_exactness.py``.
"""
import mxnet as mx
import numpy as np
import torch
from mxnet import autograd, gluon

import migrate
from tests.migrate import _mx_reference as R
from tests.migrate.optim import test_lbsgd_sgld_dcasgd_groupadagrad as L

#: case -> (MXNet optimizer, kwargs before wd and clipping, wd): R.CASES and every other MXNet optimizer
CASES = dict({case: (name, kwargs, 0.01) for case, name, kwargs in R.CASES}, **{
    "lbsgd": ("lbsgd", dict(L.LBSGD, warmup_strategy="lars"), 0.01),
    "dcasgd": ("dcasgd", {"learning_rate": 0.1, "lamda": 0.5}, 0.01),
    "groupadagrad": ("groupadagrad", {"learning_rate": 0.1}, 0.0),  # MXNet asserts wd == 0
    "sgld": ("sgld", {"learning_rate": 0.01}, 0.01),
    "test": ("test", {"learning_rate": 0.1}, 0.01),
})
#: 2-D (groupadagrad's rows); 88k elements in all, over mxupdate's MIN_SPLIT, several of LAMB's blocks
SHAPES = ((263, 267), (47, 263), (64, 64), (25, 40), (1, 7))
#: lr_mult, wd_mult of each tensor of SHAPES
MULTS = ((1.0, 1.0), (0.5, 1.0), (2.0, 0.0), (1.0, 1.0), (1.0, 1.0))
BATCH = 4
NOISE_SEED = 11


def start(dtype):
    """The seeded starting weights of SHAPES (numpy arrays of ``dtype``)."""
    rng = np.random.RandomState(5)
    return [rng.randn(*shape).astype(dtype) for shape in SHAPES]


class _Holder(gluon.Block):
    """Parameters of SHAPES holding ``start`` (no forward: the loss is built from their data)."""

    def __init__(self, dtype):
        super().__init__(prefix="same_")
        for i, shape in enumerate(SHAPES):
            param = self.params.get(f"p{i}", shape=shape, dtype=dtype)
            param.lr_mult, param.wd_mult = MULTS[i]
        self.initialize()
        for param, values in zip(self.params.values(), start(dtype)):
            param.set_data(mx.nd.array(values, dtype=dtype))


def _gradients(dtype, steps):
    rng = np.random.RandomState(9)
    return [[rng.randn(*shape).astype(dtype) for shape in SHAPES] for _ in range(steps)]


def run(case, dtype, steps):
    """(MXNet's weights, migrate's torch weights) as lists of numpy arrays after ``steps`` steps of ``case``."""
    name, opt_kwargs, wd = CASES[case]
    kwargs, schedule = R.case_kwargs(opt_kwargs)
    kwargs["wd"] = wd
    schedule = dict(schedule, step=2)  # the lr halves every 2 updates
    holder = _Holder(dtype)
    params = list(holder.collect_params().values())
    model = torch.nn.ParameterList([torch.nn.Parameter(torch.from_numpy(p.data().asnumpy().copy())) for p in params])
    trainer = R.mx_trainer(holder, name, kwargs, schedule)
    settings = R.exported_settings(trainer)
    grads = _gradients(dtype, steps)
    mx.random.seed(NOISE_SEED)
    for step in grads:
        with autograd.record():
            loss = sum((p.data() * mx.nd.array(g, dtype=dtype)).sum() for p, g in zip(params, step))
        loss.backward()
        trainer.step(BATCH)
    optimizer = migrate.torch_optimizer(model, settings, {p.name: str(i) for i, p in enumerate(params)},
                                        rescale_grad=1 / BATCH)
    optimizer.noise = L.mx_noise(NOISE_SEED)  # SGLD: MXNet's samples again, in MXNet's order
    scheduler = migrate.torch_lr_scheduler(optimizer, settings, num_update=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for step in grads:
            for param, grad in zip(model, step):
                param.grad = torch.from_numpy(grad.copy())
            optimizer.step()
            scheduler.step()
    finally:
        torch.set_num_threads(threads)
    return [p.data().asnumpy() for p in params], [p.detach().numpy().copy() for p in model]
