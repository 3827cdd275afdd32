"""LrTrainer.step against gluon.Trainer.step on resnet50_v1 (CPU, same multipliers, same gradients).

Standalone: ``python bench/bench_trainer_overhead.py [--reps 21]``. Both trainers drive the SAME network, so
they see identical parameters, gradients and multipliers (LrTrainer writes its resolved table onto the Parameters,
which the stock Trainer reads too). Steps are interleaved (stock, lr, stock, lr, ...) so drift in machine load hits
both alike (who goes first alternates); the table prints median and quartile times, the ratio of medians
and the median of the per-step ratios (adjacent steps share the machine's load, so this is the robust figure
on a busy machine), and the number of Python calls one step makes in each (deterministic). Only ``step`` is timed: one
backward pass makes the gradients, and before each step every gradient is marked fresh again.
"""
import argparse
import cProfile
import os
import pstats
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")

import mxnet as mx  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

from gluon_lr import LrTrainer, Rule  # noqa: E402

OPTIMIZER = ("sgd", {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-4})
RULES = [Rule("*", lr_mult=0.1), Rule("resnetv10_dense0_*", lr_mult=1.0), Rule("norm", wd_mult=0.0),
         Rule("bias", wd_mult=0.0)]


def _network():
    """resnet50_v1 with random init and gradients from one backward pass on a 2-image batch."""
    mx.random.seed(0)
    net = gluon.model_zoo.vision.resnet50_v1(classes=10)
    net.initialize(mx.init.Xavier())
    data = mx.nd.random.uniform(shape=(2, 3, 224, 224))
    with autograd.record():
        loss = net(data).sum()
    loss.backward()
    mx.nd.waitall()
    return net


def _timed_step(trainer, params) -> float:
    """Seconds for one trainer.step(2), gradients marked fresh first (not timed)."""
    for param in params:
        for array in param.list_data():
            array._fresh_grad = True
    start = time.perf_counter()
    trainer.step(2)
    mx.nd.waitall()
    return time.perf_counter() - start


def _python_calls(trainer, params) -> int:
    """Python function calls made by one step (deterministic, unlike times on a shared machine)."""
    profile = cProfile.Profile()
    profile.runcall(_timed_step, trainer, params)
    return pstats.Stats(profile).total_calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=41, help="interleaved timed steps per trainer")
    args = parser.parse_args()
    net = _network()
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    lr_trainer = LrTrainer(net, OPTIMIZER[0], dict(OPTIMIZER[1]), rules=RULES)
    stock = gluon.Trainer(net.collect_params(), OPTIMIZER[0], dict(OPTIMIZER[1]))
    assert all(p.lr_mult == lr_trainer.lr_mult[p.name] for p in params), "stock Trainer must see the same table"
    times = {"gluon.Trainer": [], "LrTrainer": []}
    order = [("gluon.Trainer", stock), ("LrTrainer", lr_trainer)]
    for rep in range(args.reps + 3):
        for name, trainer in (order if rep % 2 else order[::-1]):  # alternate who goes first
            elapsed = _timed_step(trainer, params)
            if rep >= 3:  # the first steps create optimizer states
                times[name].append(elapsed)
    print(f"resnet50_v1, {len(params)} trained tensors, sgd momentum, CPU, OMP_NUM_THREADS="
          f"{os.environ['OMP_NUM_THREADS']}, {args.reps} interleaved steps each")
    print(f"{'trainer':<15} {'median ms':>10} {'q1 ms':>8} {'q3 ms':>8}")
    for name, values in times.items():
        q1, _, q3 = statistics.quantiles(values, n=4)
        print(f"{name:<15} {statistics.median(values) * 1e3:>10.2f} {q1 * 1e3:>8.2f} {q3 * 1e3:>8.2f}")
    ratio = statistics.median(times["LrTrainer"]) / statistics.median(times["gluon.Trainer"])
    paired = statistics.median(a / b for a, b in zip(times["LrTrainer"], times["gluon.Trainer"]))
    print(f"ratio LrTrainer / gluon.Trainer: {ratio:.3f}x of medians, {paired:.3f}x median of paired steps "
          f"(target <= 1.02x: {'met' if paired <= 1.02 else 'NOT met'} on the paired ratio)")
    calls = {name: _python_calls(trainer, params) for name, trainer in order}
    print(f"Python calls per step: gluon.Trainer {calls['gluon.Trainer']}, LrTrainer {calls['LrTrainer']} "
          f"({calls['LrTrainer'] - calls['gluon.Trainer']:+d})")


if __name__ == "__main__":
    main()
