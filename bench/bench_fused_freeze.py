"""Benchmark: the fast update path after freeze/unfreeze mid-run, in a static_alloc/static_shape graph.

resnet18_v1 (11.7M parameters) on CPU, ``hybridize(static_alloc=True, static_shape=True)``, SGD with momentum, synthetic
data. Each row trains its own network; every ``--cycle`` steps the freeze rows call ``freeze(net.features)`` and, the
next step, ``unfreeze(net.features)`` (the step in between trains only the output layer). Only ``trainer.step`` is
timed (forward and backward are finished first), on the steps where everything trains, median over ``--steps``, all
rows interleaved round-robin in this one run:

- stock ``gluon.Trainer``;
- ``LrTrainer(fused=False)`` (the stock loop behind LrTrainer), with the freeze/unfreeze cycles;
- ``LrTrainer`` (fast path), never frozen;
- ``LrTrainer`` (fast path), with the freeze/unfreeze cycles: the step stays on the fast path (it reads every
  parameter's arrays anew at each update; nothing is repacked).

The last column counts the parameters on the fast path at the end (``trainer.fused_params``).

Usage: ``python bench/bench_fused_freeze.py [--steps 12] [--cycle 4] [--batch 2]``
"""
import argparse
import statistics
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd
from mxnet.gluon.model_zoo import vision

from gluon_lr import LrTrainer

OPTIMIZER = ("sgd", {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-4})


def _setup(kind):
    """(net, trainer, cycles) for a row kind in {'stock', 'plain', 'fused', 'fused_cycles'}."""
    mx.random.seed(0)
    net = vision.resnet18_v1(classes=10)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    net(nd.zeros((1, 3, 224, 224)))  # finish deferred initialisation before the trainer packs (no backward yet)
    if kind == "stock":
        return net, gluon.Trainer(net.collect_params(), *OPTIMIZER), False
    return net, LrTrainer(net, *OPTIMIZER, fused=kind != "plain"), kind != "fused"


def _step(net, trainer, x, y, loss_fn):
    """Forward and backward (finished), then the timed ``trainer.step``; seconds of the step."""
    with autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    nd.waitall()
    start = time.perf_counter()
    trainer.step(x.shape[0])
    nd.waitall()
    return time.perf_counter() - start


def main():
    """Print one table: per row, the median update time and its ratio to the stock trainer's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--cycle", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    args = parser.parse_args()
    kinds = ["stock", "plain", "fused", "fused_cycles"]
    labels = {"stock": "gluon.Trainer", "plain": "LrTrainer(fused=False), freeze cycles",
              "fused": "LrTrainer, never frozen", "fused_cycles": "LrTrainer, freeze cycles"}
    rows = [_setup(kind) for kind in kinds]
    rng, loss_fn = np.random.RandomState(0), gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = nd.array(rng.uniform(-1, 1, (args.batch, 3, 224, 224))), nd.array(rng.randint(0, 10, args.batch))
    times = [[] for _ in kinds]
    for step in range(args.steps + 2):
        phase = step % args.cycle
        for k, (net, trainer, cycles) in enumerate(rows):
            if cycles and phase == args.cycle - 1:
                trainer.freeze(net.features)
            elif cycles and phase == 0 and step:
                trainer.unfreeze(net.features)
            seconds = _step(net, trainer, x, y, loss_fn)
            if step > 1 and phase != args.cycle - 1:
                times[k].append(seconds)
    medians = [statistics.median(t) for t in times]
    print(f"resnet18_v1, CPU, static_alloc+static_shape, batch {args.batch}, SGD momentum, freeze/unfreeze every "
          f"{args.cycle} steps, median of {len(times[0])} full updates (mxnet {mx.__version__})")
    print(f"{'trainer':40} {'update ms':>10} {'x stock':>8} {'fused params':>13}")
    for kind, (_, trainer, _), median in zip(kinds, rows, medians):
        fused = len(getattr(trainer, "fused_params", ()))
        print(f"{labels[kind]:40} {median * 1e3:10.2f} {median / medians[0]:8.2f} {fused:13d}")


if __name__ == "__main__":
    main()
