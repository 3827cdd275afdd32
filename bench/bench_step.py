"""Optimizer step time on resnet50_v1, mobilenet_v2_1.0 and an MLP of resnet50's size: stock Trainer, LrTrainer,
torch.optim, and the memory-bandwidth floor.

Run: ``OMP_NUM_THREADS=2 PYTHONPATH=$PWD python bench/bench_step.py [--reps 7] [--model all] [--ctx cpu]``. Per model
and optimizer, everything is measured in one process, interleaved rep by rep (a shared machine's load then hits every
row alike); the table shows the minimum and the median per row, ratios of minima, and paired ratios. "LrTrainer" is
the default fast path: on CPU the compiled kernels (``mxupdate.kernels``, numba), one launch per table of
per-tensor addresses, one share per core; on a GPU (``--ctx gpu``) MXNet's operators on the same tables; "fused=False"
is the stock loop inside LrTrainer. Before each timed step the gradients are flagged as fresh (what a backward
does), untimed. Weights are in MXNet's default layout, as in training (an inference forward
leaves convolution weights in MKLDNN's layout; the first update after it reorders them back, once, untimed here).
The first step's compile or cache-load cost is measured by ``bench/bench_first_step.py``. The floor is the bytes one
step must stream (SGD-momentum: read w, g, m and write w, m = 20 bytes per float32 parameter; Adam: read w, g, m, v
and write w, m, v = 28 bytes) divided by the best in-place add bandwidth measured here on arrays holding as many bytes
as the step keeps (w, g, m = 12 bytes per parameter; Adam 16), so both run where the same data lives: in the caches
only if the step's working set fits there (on CPU numpy, MXNet and torch; on a GPU MXNet and torch; 12 bytes per
element).
"""
import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import mxnet as mx
import numpy as np
import torch
from mxnet import gluon, nd

from gluon_lr import LrTrainer, Rule

WARMUP = 6  # steps before timing: optimizer states are created, LrTrainer picks its kernels (4 timed steps)
BYTES_PER_PARAM = {"sgd-momentum": 20, "adam": 28}
#: Bytes per parameter a step keeps in memory (w, g, m; Adam also v): the stream rows work on as many bytes, so the
#: floor's bandwidth is measured where the step's data lives (a small model's arrays fit in the caches only if the
#: step's whole working set does).
RESIDENT_BYTES = {"sgd-momentum": 12, "adam": 16}
OPTIMIZERS = {"sgd-momentum": ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4}),
              "adam": ("adam", {"learning_rate": 1e-3, "wd": 1e-4})}
#: Fine-tuning rules per model: the backbone at lr_mult 0.1, the head at 1, no weight decay on norms and biases.
RULES = {"resnet50": [Rule("*", lr_mult=0.1), Rule("*dense*", lr_mult=1.0), Rule("norm", wd_mult=0.0),
                      Rule("bias", wd_mult=0.0)],
         "mobilenet": [Rule("*", lr_mult=0.1), Rule("*output*", lr_mult=1.0), Rule("norm", wd_mult=0.0)],
         "mlp": [Rule("*", lr_mult=0.1), Rule("mlp_dense5_*", lr_mult=1.0), Rule("bias", wd_mult=0.0)]}
NAMES = {"resnet50": "resnet50_v1", "mobilenet": "mobilenet_v2_1.0", "mlp": "MLP 6x Dense(2048)"}


def build_net(model: str = "resnet50", ctx=None):
    """resnet50_v1, mobilenet_v2_1.0 or ``mlp`` (6 Dense(2048) layers, 25.2M parameters) with random init on ``ctx``,
    and gradients filled with seeded noise."""
    mx.random.seed(0)
    ctx = ctx or mx.cpu()
    if model == "mlp":
        net = gluon.nn.HybridSequential(prefix="mlp_")
        with net.name_scope():
            for _ in range(6):
                net.add(gluon.nn.Dense(2048, in_units=2048))
        net.initialize(mx.init.Xavier(), ctx=ctx)
    else:
        net = (gluon.model_zoo.vision.resnet50_v1() if model == "resnet50"
               else gluon.model_zoo.vision.mobilenet_v2_1_0())
        net.initialize(mx.init.Xavier(), ctx=ctx)
        net(nd.zeros((1, 3, 64, 64), ctx=ctx))
    for param in net.collect_params().values():
        if param.grad_req != "null":
            param.grad(ctx)[:] = nd.random.normal(scale=1e-3, shape=param.shape, ctx=ctx)
    nd.waitall()
    return net


def mark_fresh(params):
    """Flag every gradient as written by backward (the benchmark runs no backward)."""
    for param in params:
        if param.grad_req != "null":
            for data in param.list_data():
                data._fresh_grad = True


def timed(fn, sync, prepare=None) -> float:
    """Seconds for one call of ``fn`` including the wait for its asynchronous work (``prepare`` runs first, untimed)."""
    if prepare is not None:
        prepare()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def mx_step(trainer, params):
    """(one trainer.step, its sync, what readies the gradients before it, untimed: a backward would flag them)."""
    return lambda: trainer.step(1), nd.waitall, lambda: mark_fresh(params)


def torch_case(net, kind: str, impl: str, device: str):
    """A torch optimizer over tensors of the same shapes, lrs and wds as the LrTrainer table."""
    torch.manual_seed(0)
    groups = {}
    for param in net.collect_params().values():
        if param.grad_req == "null":
            continue
        tensor = torch.randn(param.shape, device=device).requires_grad_()
        tensor.grad = torch.randn(param.shape, device=device) * 1e-3
        groups.setdefault((param.lr_mult, param.wd_mult), []).append(tensor)
    name, hyper = OPTIMIZERS[kind]
    flags = {"fused": True} if impl == "fused" else {"foreach": True}
    param_groups = [{"params": ts, "lr": hyper["learning_rate"] * lr, "weight_decay": hyper["wd"] * wd}
                    for (lr, wd), ts in groups.items()]
    if name == "sgd":
        optimizer = torch.optim.SGD(param_groups, lr=hyper["learning_rate"], momentum=hyper["momentum"], **flags)
    else:
        optimizer = torch.optim.Adam(param_groups, lr=hyper["learning_rate"], **flags)
    return optimizer.step


def stream_rows(n: int, ctx) -> dict:
    """In-place adds ``a += b`` on n float32 elements (12 bytes per element, no write-allocate, like a step): on CPU
    numpy on 1 and 2 threads, MXNet and torch; on a GPU MXNet and torch. Timed with the other rows, so they see the
    same machine load."""
    a_np, b_np = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    a_mx, b_mx = nd.array(a_np, ctx=ctx), nd.array(b_np, ctx=ctx)
    device = "cuda" if ctx.device_type == "gpu" else "cpu"
    a_t, b_t = torch.from_numpy(a_np.copy()).to(device), torch.from_numpy(b_np.copy()).to(device)
    torch_sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows = {"stream mxnet": (lambda: a_mx.__iadd__(b_mx), nd.waitall),
            "stream torch": (lambda: a_t.add_(b_t), torch_sync)}
    if device == "cuda":
        return rows
    pool = ThreadPoolExecutor(2)
    halves = (slice(0, n // 2), slice(n // 2, n))

    def numpy_two_threads():
        for part in [pool.submit(np.add, a_np[h], b_np[h], out=a_np[h]) for h in halves]:
            part.result()

    return {"stream numpy": (lambda: np.add(a_np, b_np, out=a_np), lambda: None),
            "stream numpy x2": (numpy_two_threads, lambda: None), **rows}


def rows_for(model: str, kind: str, ctx) -> tuple:
    """(rows {label: (step, sync)}, trainable parameter count, tensor count, LrTrainer) for one model and optimizer."""
    net = build_net(model, ctx)
    params = list(net.collect_params().values())
    trainable = [p for p in params if p.grad_req != "null"]
    name, hyper = OPTIMIZERS[kind]
    lr_trainer = LrTrainer(net, name, dict(hyper), rules=RULES[model])
    stock = gluon.Trainer(net.collect_params(), name, dict(hyper))  # reads the same Parameter.lr_mult/wd_mult
    plain = LrTrainer(net, name, dict(hyper), rules=RULES[model], fused=False)
    device = "cuda" if ctx.device_type == "gpu" else "cpu"
    torch_sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows = {"stock gluon.Trainer": mx_step(stock, params),
            "LrTrainer fused=False": mx_step(plain, params),
            "LrTrainer": mx_step(lr_trainer, params),
            "torch.optim fused": (torch_case(net, kind, "fused", device), torch_sync),
            "torch.optim foreach": (torch_case(net, kind, "foreach", device), torch_sync)}
    n = sum(int(np.prod(p.shape)) for p in trainable)
    rows.update(stream_rows(stream_elements(n, kind), ctx))
    return rows, n, len(trainable), lr_trainer


def stream_elements(n: int, kind: str) -> int:
    """Elements of each stream array (a and b of ``a += b``: 8 bytes per element held) for a step on n parameters."""
    return n * RESIDENT_BYTES[kind] // 8


def run(reps: int, models: list, ctx) -> None:
    """Measure every row for each model and optimizer and print the tables."""
    torch.set_num_threads(max(1, int(mx.base.os.environ.get("OMP_NUM_THREADS", "2"))))
    for model in models:
        for kind in OPTIMIZERS:
            rows, n, tensors, lr_trainer = rows_for(model, kind, ctx)
            times = {label: [] for label in rows}
            for _ in range(WARMUP):
                for label, row in rows.items():
                    timed(*row)
            for _ in range(reps):
                for label, row in rows.items():
                    times[label].append(timed(*row))
            streams = {label: times.pop(label) for label in list(times) if label.startswith("stream")}
            paths = lr_trainer.explain().to_dict()
            fast = sum(int(np.prod(row["shape"])) for row in paths.values() if row["update"] in ("compiled",
                                                                                                "mxnet-ops"))
            print_table(f"{kind}: {NAMES[model]}", n, tensors, times, streams, BYTES_PER_PARAM[kind], ctx,
                        stream_elements(n, kind))
            kinds = sorted({row["update"] for row in paths.values() if row["update"] != "none"})
            print(f"on LrTrainer's fast path: {fast / 1e6:.2f}M of {n / 1e6:.2f}M parameters (paths: {kinds})")


def print_table(title: str, n: int, tensors: int, times: dict, streams: dict, step_bytes: int, ctx, m: int) -> None:
    """One table per model and optimizer: min and median ms, ratios of minima, and paired ratios (median over reps of
    the ratio within one rep: rows of one rep ran back to back, so these resist a shared machine's changing load)."""
    stock_times = times["stock gluon.Trainer"]
    per_rep_floor = [step_bytes * n / max(12 * m / streams[label][r] for label in streams)
                     for r in range(len(stock_times))]
    bandwidth = {label: 12 * m / min(values) for label, values in streams.items()}
    floor, stock = step_bytes * n / max(bandwidth.values()), min(stock_times)
    print(f"\n{title}, {n / 1e6:.2f}M parameters in {tensors} tensors, float32, {ctx}")
    print(f"{'':24s} {'min ms':>8s} {'median ms':>10s} {'x stock':>8s} {'x floor':>8s} {'paired x stock':>15s} "
          f"{'paired x floor':>15s}")
    for label, values in times.items():
        paired_stock = statistics.median(v / s for v, s in zip(values, stock_times))
        paired_floor = statistics.median(v / f for v, f in zip(values, per_rep_floor))
        print(f"{label:24s} {min(values) * 1e3:8.1f} {statistics.median(values) * 1e3:10.1f} "
              f"{min(values) / stock:8.2f} {min(values) / floor:8.2f} {paired_stock:15.2f} {paired_floor:15.2f}")
    print(f"{'bandwidth floor':24s} {floor * 1e3:8.1f} {statistics.median(per_rep_floor) * 1e3:10.1f} "
          f"{floor / stock:8.2f} {1.0:8.2f}")
    print(f"floor = {step_bytes} B/param x {n / 1e6:.2f}M / best in-place add bandwidth; best GB/s: "
          + ", ".join(f"{label[7:]} {value / 1e9:.1f}" for label, value in bandwidth.items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions per row")
    parser.add_argument("--model", choices=("all", "resnet50", "mobilenet", "mlp"), default="all")
    parser.add_argument("--ctx", choices=("cpu", "gpu"), default="cpu")
    arguments = parser.parse_args()
    run(arguments.reps, list(NAMES) if arguments.model == "all" else [arguments.model],
        mx.gpu(0) if arguments.ctx == "gpu" else mx.cpu())
