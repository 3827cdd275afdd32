"""Benchmark: the cost of freezing weights while their biases train (the partially frozen layer workaround).

MXNet 1.9.1's MKLDNN FullyConnected backward skips the bias gradient when the weight needs none, so ``freeze`` keeps a
frozen Dense weight's gradient (``grad_req='write'``) while its bias trains, and hides it from the update. This script
measures what that costs, on CPU, hybridized, SGD with momentum, all rows in this one run, steps interleaved
round-robin (median of ``--repeats`` steps after two warm-up rounds), for a Dense stack and a Conv stack:

- everything trains;
- every weight frozen, biases train (Dense: weight gradients still computed; Conv: ``grad_req='null'``);
- every weight and bias frozen except the last layer's (both ``'null'``: the cheap case);
- Dense only: weights set to ``grad_req='null'`` by hand with a stock ``gluon.Trainer``: the cheap but WRONG step
  (stale bias gradients), shown for what the workaround gives up.

Usage: ``python bench/bench_freeze_partial.py [--batch 64] [--repeats 10]``
"""
import argparse
import statistics
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon, nd
from mxnet.gluon import nn

from gluon_lr import LrTrainer


def _network(kind):
    """Dense stack: 4 x Dense(1024) on 1024 inputs; Conv stack: 4 x Conv2D(64, 3x3) on 64x32x32. Seeded."""
    mx.random.seed(0)
    net = nn.HybridSequential(prefix="b_")
    with net.name_scope():
        for _ in range(4):
            net.add(nn.Dense(1024, activation="relu") if kind == "dense" else
                    nn.Conv2D(64, 3, padding=1, activation="relu"))
        net.add(nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


def _setup(kind, how, x):
    """(net, trainer) for one row: how in {'all', 'weights', 'all_but_head', 'stock_null'}."""
    net = _network(kind)
    net(x)  # finish deferred initialisation
    params = net.collect_params()
    body = [name for name in params if not name.startswith(net[-1].prefix)]
    optimizer = ("sgd", {"learning_rate": 0.01, "momentum": 0.9})
    if how == "stock_null":
        for name in body:
            if name.endswith("weight"):
                params[name].grad_req = "null"
        return net, gluon.Trainer(params, *optimizer)
    trainer = LrTrainer(net, *optimizer)
    if how == "weights":
        trainer.freeze([name for name in body if name.endswith("weight")])
    elif how == "all_but_head":
        trainer.freeze(body)
    return net, trainer


def _step(net, trainer, x, y, loss_fn):
    """Seconds of one forward + backward + update."""
    start = time.perf_counter()
    with autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    trainer.step(x.shape[0])
    nd.waitall()
    return time.perf_counter() - start


def main():
    """Print one table: per network and row, the median step time and its ratio to the full step."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    rows = [("dense", "all"), ("dense", "weights"), ("dense", "all_but_head"), ("dense", "stock_null"),
            ("conv", "all"), ("conv", "weights"), ("conv", "all_but_head")]
    rng = np.random.RandomState(0)
    inputs = {"dense": nd.array(rng.uniform(-1, 1, (args.batch, 1024))),
              "conv": nd.array(rng.uniform(-1, 1, (args.batch // 8, 64, 32, 32)))}
    setups = [_setup(kind, how, inputs[kind]) for kind, how in rows]
    times = [[] for _ in rows]
    for i in range(args.repeats + 2):
        for k, ((kind, _), (net, trainer)) in enumerate(zip(rows, setups)):
            x = inputs[kind]
            seconds = _step(net, trainer, x, nd.array(rng.randint(0, 10, x.shape[0])), loss_fn)
            if i > 1:
                times[k].append(seconds)
    medians = [statistics.median(t) for t in times]
    full = {kind: medians[rows.index((kind, "all"))] for kind in ("dense", "conv")}
    print(f"{'network':8} {'frozen':34} {'step ms':>9} {'x full':>7}")
    labels = {"all": "nothing", "weights": "weights (biases train)", "all_but_head": "all but the head",
              "stock_null": "weights null by hand (WRONG grads)"}
    for (kind, how), median in zip(rows, medians):
        print(f"{kind:8} {labels[how]:34} {median * 1e3:9.2f} {median / full[kind]:7.2f}")


if __name__ == "__main__":
    main()
