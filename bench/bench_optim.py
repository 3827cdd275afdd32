"""Benchmark: one step of each exact MXNet optimizer against the closest stock torch optimizer (foreach).

Parameters have resnet50's shapes (torchvision, no weights downloaded), gradients are random, float32 (or
``--dtype float64``: LAMB then replays MXNet's sequential float norms), CPU.
Run: PYTHONPATH=$PWD python bench/bench_optim.py [--repeat N] [--threads N] [--dtype D] [--only adam ftrl ...]
Prints one table: median step time of each (measured interleaved, in one run), and the ratio exact / stock
(target: within 1.3x). LAMB, Signum and FTRL have no torch counterpart: their "stock" column is the stand-in
that ``torch_optimizer(..., exact=False)`` returns (AdamW, SGD, Adagrad), which does less work.
"""
import argparse
import statistics
import time

import torch
import torchvision

from migrate.optim import OPTIMIZERS
from migrate.optim import stock as _stock

CASES = [("sgd", {"momentum": 0.9}), ("nag", {"momentum": 0.9}), ("adam", {}), ("rmsprop", {}),
         ("rmsprop", {"centered": True}), ("adagrad", {}), ("adadelta", {}), ("adamax", {}), ("nadam", {}),
         ("lamb", {}), ("signum", {}), ("ftrl", {})]


def _params(seed, dtype):
    """resnet50-shaped leaf tensors of ``dtype`` with random gradients."""
    torch.manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(p.shape, dtype=dtype)) for p in torchvision.models.resnet50().parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    return params


def _time_pair(first, second, repeat):
    """Median wall times of ``first.step()`` and ``second.step()``, interleaved, after one warm-up step each."""
    first.step()
    second.step()
    times = ([], [])
    for _ in range(repeat):
        for optimizer, out in zip((first, second), times):
            start = time.perf_counter()
            optimizer.step()
            out.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def _options(hyper):
    return dict(hyper, lr=0.01, weight_decay=1e-4, rescale_grad=1.0, clip_gradient=None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--only", nargs="*", default=None, help="rows to run (e.g. adam lamb rmsprop-centered)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = _params(0, getattr(torch, args.dtype))
    count = sum(p.numel() for p in params)
    print(f"resnet50 shapes: {len(params)} tensors, {count / 1e6:.1f}M parameters, "
          f"{args.dtype}, {args.threads} threads, median of {args.repeat}")
    print(f"{'optimizer':<18}{'exact ms':>10}{'stock ms':>10}{'ratio':>8}  stock")
    for name, hyper in CASES:
        label = name + ("-centered" if hyper.get("centered") else "")
        if args.only and label not in args.only:
            continue
        options = _options(hyper)
        exact_opt = OPTIMIZERS[name]([{"params": params}], **options)
        stock_opt, _ = _stock.stock_optimizer(name, [{"params": params}], options)
        exact, stock = _time_pair(exact_opt, stock_opt, args.repeat)
        stock_name = type(stock_opt).__name__
        del exact_opt, stock_opt
        print(f"{label:<18}{exact * 1e3:>10.1f}{stock * 1e3:>10.1f}{exact / stock:>8.2f}  {stock_name}")


if __name__ == "__main__":
    main()
