"""Benchmark: fine-tuning only the output layer of resnet50_v1 (everything else frozen) vs a full training step.

One training step = forward + backward + optimizer update (SGD with momentum), on CPU, hybridized network, random
init, synthetic data. Rows, all measured in this one run, steps interleaved round-robin (median of ``--repeats``
steps after one warm-up round):

- full step with stock ``gluon.Trainer``;
- full step with ``LrTrainer``;
- ``LrTrainer`` with ``freeze(net.features)``: only the output layer trains (target <= 0.6x the full step);
- ``LrTrainer`` with ``lr_mult=0`` on the backbone (what people try first; it computes every gradient and still
  moves the weights under momentum).

Usage: ``python bench/bench_freeze.py [--batch 4] [--repeats 5]``
"""
import argparse
import statistics
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd
from mxnet.gluon.model_zoo import vision

from gluon_lr import LrTrainer


def _network():
    """resnet50_v1 with 10 classes, seeded random init, hybridized."""
    mx.random.seed(0)
    net = vision.resnet50_v1(classes=10)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


def _one_step(net, trainer, x, y, loss_fn):
    """Seconds of (forward + backward) and of the update for one step."""
    start = time.perf_counter()
    with autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    nd.waitall()
    middle = time.perf_counter()
    trainer.step(x.shape[0])
    nd.waitall()
    return middle - start, time.perf_counter() - middle


def _time_all(setups, x, y, repeats):
    """Median (fwd+bwd, update) per setup; steps interleaved round-robin so machine load hits all rows alike."""
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    times = [[] for _ in setups]
    for i in range(repeats + 1):  # round 0 warms up (deferred init, graph caching)
        for k, (net, trainer) in enumerate(setups):
            measured = _one_step(net, trainer, x, y, loss_fn)
            if i:
                times[k].append(measured)
    return [(statistics.median(t[0] for t in row), statistics.median(t[1] for t in row)) for row in times]


def _configs():
    """(label, function net -> trainer) for each row."""
    opt = ("sgd", {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-4})

    def frozen(net):
        trainer = LrTrainer(net, *opt)
        trainer.freeze(net.features)
        return trainer

    def lr_zero(net):
        trainer = LrTrainer(net, *opt)
        trainer.set_lr_mult({name: 0.0 for name in net.features.collect_params().keys()})
        return trainer

    return [("full step, gluon.Trainer", lambda net: gluon.Trainer(net.collect_params(), *opt)),
            ("full step, LrTrainer", lambda net: LrTrainer(net, *opt)),
            ("output layer only, LrTrainer.freeze(features)", frozen),
            ("lr_mult=0 on features (does not freeze)", lr_zero)]


def main():
    """Run every configuration once on a fresh network and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.RandomState(0)
    x = nd.array(rng.uniform(-1, 1, size=(args.batch, 3, 224, 224)))
    y = nd.array(rng.randint(0, 10, size=(args.batch,)))
    configs = _configs()
    setups = []
    for _, make in configs:
        net = _network()
        setups.append((net, make(net)))
    rows = [(label, *measured) for (label, _), measured in zip(configs, _time_all(setups, x, y, args.repeats))]
    full = rows[1][1] + rows[1][2]
    print(f"resnet50_v1, CPU, batch {args.batch}, SGD momentum, median of {args.repeats} steps "
          f"(mxnet {mx.__version__})")
    print(f"{'configuration':48s} {'fwd+bwd s':>10s} {'update s':>9s} {'step s':>8s} {'vs LrTrainer full':>18s}")
    for label, fb, up in rows:
        print(f"{label:48s} {fb:10.3f} {up:9.3f} {fb + up:8.3f} {(fb + up) / full:17.2f}x")


if __name__ == "__main__":
    main()
