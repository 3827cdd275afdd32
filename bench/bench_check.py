"""Benchmark: ``migrate.check_training`` on resnet50 (K=1) against what it replaces by hand.

The pair is model-zoo resnet50_v1 and its torch module from ``migrate.generate_torch`` (an equivalent pair: the check
runs to its end, every tensor compared). The baseline is one MXNet training step (hybridized Gluon net, LrTrainer,
SGD with momentum, softmax cross-entropy), one torch training step (the generated module, migrate's exact SGD) and
one ``migrate.verify`` (eval mode, node by node); the target is check <= 3x the baseline. The mapping is built once
beforehand and given to both ``verify`` and the check. Each row is the best of ``--repeat`` runs after one warm-up
run of the same work (first-call costs: MKLDNN primitives, numba kernels, torch's allocator; best of, because the
2 cores are shared), all in this one process. A last row,
outside the target, runs the check in float64 (``float64=True``) and prints how many tensors diverge there: in
float32 a deep net's training amplifies rounding (ReLU inputs within rounding of 0 flip their mask on one side,
BatchNorm over few values per channel) past the tolerance, in float64 it does not.

Run: OMP_NUM_THREADS=2 PYTHONPATH=. python bench/bench_check.py [--batch 4] [--size 224] [--repeat 3]
"""
import argparse
import os
import tempfile
import time
import warnings

import mxnet as mx
import numpy as np
import torch
from mxnet import autograd, gluon
from mxnet.gluon.model_zoo import vision

import migrate
from gluon_lr import LrTrainer

warnings.filterwarnings("ignore")
TARGET = 3.0


def _network():
    mx.random.seed(0)
    net = vision.resnet50_v1()
    net.initialize(mx.init.Xavier())
    return net


def _mxnet_step(net, trainer, x, y):
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(mx.nd.array(x)), mx.nd.array(y))
    loss.backward()
    trainer.step(x.shape[0])
    mx.nd.waitall()


def _torch_step(model, optimizer, x, y):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y).long(),
                                      reduction="sum").backward()
    optimizer.step()


def _timed(fn, *args, repeat=1):
    """(best seconds of ``repeat`` calls of ``fn(*args)`` after one warm-up call, the last call's result)."""
    fn(*args)
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - start)
    return best, out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per row (best of)")
    args = parser.parse_args(argv)
    shape = (args.batch, 3, args.size, args.size)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.integers(0, 1000, args.batch)
    net = _network()
    net.hybridize()
    trainer = LrTrainer(net, "sgd", {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-4}, kvstore=None)
    with tempfile.TemporaryDirectory() as folder:
        _mxnet_step(net, trainer, x, y)
        trainer.export_settings(os.path.join(folder, "settings.json"))
        settings = migrate.load_settings(os.path.join(folder, "settings.json"))
        model = migrate.generate_torch(net, (1,) + shape[1:], os.path.join(folder, "model.py"))
    mapping = migrate.name_mapping(net, model, (1,) + shape[1:])
    torch_model = type(model)()
    torch_model.load_state_dict(model.state_dict())
    optimizer = migrate.torch_optimizer(torch_model, settings, mapping)
    n = args.repeat
    rows = [("MXNet training step", _timed(_mxnet_step, net, trainer, x, y, repeat=n)[0]),
            ("torch training step", _timed(_torch_step, torch_model, optimizer, x, y, repeat=n)[0]),
            ("verify (eval, node by node)", _timed(migrate.verify, net, model, mapping, shape, repeat=n)[0])]
    seconds, report = _timed(lambda: migrate.check_training(net, model, x, labels=y, settings=settings,
                                                            mapping=mapping, steps=1), repeat=n)
    baseline = sum(t for _, t in rows)
    rows += [("baseline (the three above)", baseline), ("check_training, K=1", seconds)]
    seconds64, report64 = _timed(lambda: migrate.check_training(net, model, x, labels=y, settings=settings,
                                                                mapping=mapping, steps=1, float64=True))
    print(f"resnet50_v1 vs its generated torch module, input {shape}, CPU, {torch.get_num_threads()} torch threads, "
          f"best of {n} runs each after one warm-up")
    print(f"{'what':<30}  {'seconds':>8}")
    for label, t in rows:
        print(f"{label:<30}  {t:>8.2f}")
    ratio = seconds / baseline
    print(f"check / baseline: {ratio:.2f}x (target <= {TARGET:g}x: {'met' if ratio <= TARGET else 'NOT MET'}); "
          f"{sum(r.compared for r in report.rows)} tensors compared, {len(report.diverged)} diverged "
          f"(atol {report.atol:g}; first: {_first(report)})")
    print(f"check_training, K=1, float64: {seconds64:.2f} s ({seconds64 / baseline:.2f}x the float32 baseline, "
          f"outside the target); {len(report64.diverged)} of {sum(r.compared for r in report64.rows)} tensors "
          f"diverged (atol {report64.atol:g}); largest difference {_largest(report64):.2g} (relative above 1)")


def _largest(report) -> float:
    return max(r.max_abs_diff / max(1.0, r.scale) for r in report.rows if r.compared)


def _first(report) -> str:
    row = report.first_divergence
    return "none" if row is None else f"{row.kind} {row.name!r} step {row.step}, relative {row.relative:.2g}"


if __name__ == "__main__":
    main()
