"""Benchmark: ``migrate.check_training`` on resnet50 (K=1) against what it replaces by hand.

The pair is model-zoo resnet50_v1 and its torch module from ``migrate.generate_torch`` (an equivalent pair: the check
runs to its end, every tensor compared). The baseline is one MXNet training step (hybridized Gluon net, LrTrainer,
SGD with momentum, softmax cross-entropy), one torch training step (the generated module, migrate's exact SGD) and
one ``migrate.verify`` (eval mode, node by node); the target is check <= 3x the baseline. The mapping is built once
beforehand and given to both ``verify`` and the check. Each row is the best of ``--repeat`` runs after one warm-up
run of the same work (first-call costs: MKLDNN primitives, numba kernels, torch's allocator; best of, because the
2 cores are shared), all in this one process. The check runs as a user gets it: float32, with its two control runs
(each framework against itself, weights times 1 + 1e-5 x noise) that measure each tensor's rounding noise; it prints
how many tensors lie beyond atol yet within 10x their control (accepted as rounding) and the largest difference /
control among them. Two rows outside the target: the check without control runs (``perturbation=None``, atol
alone) and in float64 (``float64=True``, no control runs, atol alone). A last table, the margins, runs the check at ``--margin-size`` pixels with control perturbations 1e-7, 1e-6
and 1e-5, three control seeds each: the largest difference / control beyond atol on this exact twin (what the rule's
factor 10 must exceed, whatever the seed) and how many tensors that falsely diverges.

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
    parser.add_argument("--margin-size", type=int, default=112, help="input pixels of the margins table (0: skip)")
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
    seconds_plain, _ = _timed(lambda: migrate.check_training(net, model, x, labels=y, settings=settings,
                                                             mapping=mapping, steps=1, perturbation=None), repeat=n)
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
          f"(atol {report.atol:g} or {report.noise_factor:g}x control; first: {_first(report)}); "
          f"{len(report.rounding)} beyond atol within rounding, largest difference / control among them "
          f"{_largest_to_control(report):.2f}")
    print(f"check_training, K=1, without control runs (perturbation=None): {seconds_plain:.2f} s "
          f"({seconds_plain / baseline:.2f}x the baseline)")
    print(f"check_training, K=1, float64: {seconds64:.2f} s ({seconds64 / baseline:.2f}x the float32 baseline, "
          f"outside the target); {len(report64.diverged)} of {sum(r.compared for r in report64.rows)} tensors "
          f"diverged (atol {report64.atol:g}); largest difference {_largest(report64):.2g} (relative above 1)")
    if args.margin_size:
        _margins(net, model, settings, args.batch, args.margin_size)


def _margins(net, model, settings, batch, size):
    """The margins table: per control perturbation and seed, the largest difference / control beyond atol."""
    shape = (batch, 3, size, size)
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(shape).astype(np.float32), rng.integers(0, 1000, batch)
    mapping = migrate.name_mapping(net, model, (1,) + shape[1:])
    print(f"\nmargins at input {shape}: largest difference / control among the tensors beyond atol")
    print(f"{'perturbation':>12}  {'seed':>4}  {'beyond atol':>11}  {'largest diff / control':>22}  {'diverged':>8}")
    for perturbation in (1e-7, 1e-6, 1e-5):
        for seed in range(3):
            report = migrate.check_training(net, model, x, labels=y, settings=settings, mapping=mapping,
                                            perturbation=perturbation, seed=seed)
            beyond = [r for r in report.rows if r.compared and r.max_abs_diff > report.atol * max(1.0, r.scale)]
            worst = max((r.max_abs_diff / r.control if r.control else float("inf") for r in beyond), default=0.0)
            print(f"{perturbation:>12g}  {seed:>4}  {len(beyond):>11}  {worst:>22.3g}  {len(report.diverged):>8}")


def _largest_to_control(report) -> float:
    return max((r.max_abs_diff / r.control for r in report.rounding), default=0.0)


def _largest(report) -> float:
    return max(r.max_abs_diff / max(1.0, r.scale) for r in report.rows if r.compared)


def _first(report) -> str:
    row = report.first_divergence
    return "none" if row is None else f"{row.kind} {row.name!r} step {row.step}, relative {row.relative:.2g}"


if __name__ == "__main__":
    main()
