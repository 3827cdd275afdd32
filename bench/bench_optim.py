"""Benchmark: one step of each exact MXNet optimizer against torch's fastest implementation of its family, and the
memory-bandwidth floor.

Parameters have resnet50's shapes (torchvision, no weights downloaded: 161 tensors, 25.6M parameters), gradients are
random, float32 (or ``--dtype float64``), on the CPU (or ``--device cuda``).
Run: PYTHONPATH=$PWD python bench/bench_optim.py [--repeat N] [--threads N] [--dtype D] [--device cpu|cuda]
[--only adam ftrl ...]

Prints one table: the median step time of each exact optimizer and of its torch counterpart (measured interleaved,
step by step, in one run, so a shared machine's load hits both alike), their ratio against the issue's target (1.2x;
LAMB 1.5x), the bytes one step must move (each array the update reads or writes, once: the MXNet kernel's traffic) and
that traffic's time at the best in-place add bandwidth measured in the same run (``bench_step.py``'s floor), and
how many times the floor each exact step takes. The counterparts: ``SGD(fused=True)`` for sgd, nag and signum;
``Adam(fused=True)`` for adam, adamax, nadam and ftml; ``AdamW(fused=True)`` for lamb; ``Adagrad(fused=True)`` for
adagrad and ftrl; ``RMSprop`` and ``Adadelta`` with ``foreach=True`` (torch has no fused kernel for them). The load
average is printed before and after.
"""
import argparse
import os
import statistics
import time

import torch
import torchvision

from migrate.optim import OPTIMIZERS

#: label -> (MXNet optimizer, its hyperparameters, arrays one step reads + writes per element, counterpart, target)
CASES = {
    "sgd": ("sgd", {"momentum": 0.9}, 5, "sgd", 1.2),
    "nag": ("nag", {"momentum": 0.9}, 5, "sgd", 1.2),
    "signum": ("signum", {"momentum": 0.9}, 5, "sgd", 1.2),
    "adam": ("adam", {}, 7, "adam", 1.2),
    "adamax": ("adamax", {}, 7, "adam", 1.2),
    "nadam": ("nadam", {}, 7, "adam", 1.2),
    "ftml": ("ftml", {}, 9, "adam", 1.2),
    "lamb": ("lamb", {}, 8, "adamw", 1.5),  # w, g, m, v -> m, v, d; w, d -> w (and d, float32, twice)
    "rmsprop": ("rmsprop", {}, 5, "rmsprop", 1.2),
    "rmsprop-centered": ("rmsprop", {"centered": True}, 9, "rmsprop-centered", 1.2),
    "adagrad": ("adagrad", {}, 5, "adagrad", 1.2),
    "ftrl": ("ftrl", {}, 7, "adagrad", 1.2),
    "adadelta": ("adadelta", {}, 7, "adadelta", 1.2),
}
LR, WD = 0.01, 1e-4


def counterpart(kind, params, device):
    """Torch's fastest implementation of family ``kind`` on ``params``: (optimizer, its name)."""
    fused = {"fused": True}
    foreach = {"foreach": True}
    made = {
        "sgd": lambda: torch.optim.SGD(params, lr=LR, momentum=0.9, weight_decay=WD, **fused),
        "adam": lambda: torch.optim.Adam(params, lr=LR, weight_decay=WD, **fused),
        "adamw": lambda: torch.optim.AdamW(params, lr=LR, weight_decay=WD, **fused),
        "adagrad": lambda: torch.optim.Adagrad(params, lr=LR, weight_decay=WD, **fused),
        "rmsprop": lambda: torch.optim.RMSprop(params, lr=LR, weight_decay=WD, **foreach),
        "rmsprop-centered": lambda: torch.optim.RMSprop(params, lr=LR, weight_decay=WD, centered=True, momentum=0.9,
                                                        **foreach),
        "adadelta": lambda: torch.optim.Adadelta(params, lr=1.0, weight_decay=WD, **foreach),
    }[kind]()
    flags = "fused" if kind in ("sgd", "adam", "adamw", "adagrad") else "foreach"
    return made, f"{type(made).__name__}({flags})"


def _params(seed, dtype, device):
    """resnet50-shaped leaf tensors of ``dtype`` on ``device`` with random gradients."""
    torch.manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(p.shape, dtype=dtype, device=device))
              for p in torchvision.models.resnet50().parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    return params


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _time_pair(first, second, repeat, device):
    """Median wall times of ``first.step()`` and ``second.step()``, interleaved, after two warm-up steps each."""
    for _ in range(2):
        first.step()
        second.step()
    times = ([], [])
    for _ in range(repeat):
        for optimizer, out in zip((first, second), times):
            _sync(device)
            start = time.perf_counter()
            optimizer.step()
            _sync(device)
            out.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def bandwidth(count, dtype, device, repeat):
    """The best in-place add bandwidth (bytes/s: ``a += b`` reads a and b and writes a) on two arrays of ``count``
    elements, as ``bench_step.py``'s floor measures it."""
    a = torch.rand(count, dtype=dtype, device=device)
    b = torch.rand(count, dtype=dtype, device=device)
    best = float("inf")
    for _ in range(max(repeat, 5)):
        _sync(device)
        start = time.perf_counter()
        a.add_(b)
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return 3 * count * a.element_size() / best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--only", nargs="*", default=None, help="rows to run (e.g. adam lamb rmsprop-centered)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    params = _params(0, dtype, args.device)
    count = sum(p.numel() for p in params)
    size = params[0].element_size()
    load = os.getloadavg()
    floor_bandwidth = bandwidth(count, dtype, args.device, args.repeat)
    print(f"resnet50 shapes: {len(params)} tensors, {count / 1e6:.1f}M parameters, {args.dtype}, {args.device}, "
          f"{args.threads} threads, median of {args.repeat}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"in-place add bandwidth {floor_bandwidth / 1e9:.1f} GB/s")
    print(f"{'optimizer':<18}{'exact ms':>9}{'torch ms':>9}{'ratio':>7}{'target':>7}{'MB/step':>9}{'floor ms':>9}"
          f"{'x floor':>8}  torch")
    for label, (name, hyper, arrays, kind, target) in CASES.items():
        if args.only and label not in args.only:
            continue
        options = dict(hyper, lr=1.0 if name == "adadelta" else LR, weight_decay=WD)
        exact_opt = OPTIMIZERS[name]([{"params": params}], **options)
        stock_opt, stock_name = counterpart(kind, params, args.device)
        exact, stock = _time_pair(exact_opt, stock_opt, args.repeat, args.device)
        del exact_opt, stock_opt
        moved = arrays * count * size + (2 * count * 4 if name == "lamb" else 0)  # LAMB's direction: float32
        floor = moved / floor_bandwidth
        print(f"{label:<18}{exact * 1e3:>9.1f}{stock * 1e3:>9.1f}{exact / stock:>7.2f}{target:>7.1f}"
              f"{moved / 1e6:>9.0f}{floor * 1e3:>9.1f}{exact / floor:>8.2f}  {stock_name}")
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
