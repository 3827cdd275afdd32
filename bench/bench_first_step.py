"""First-step cost of LrTrainer's compiled kernels (numba): cold (compiled now), cache-loaded, and warm steps.

Run: ``OMP_NUM_THREADS=2 PYTHONPATH=$PWD python bench/bench_first_step.py``. Each row is a fresh process on
resnet50_v1 (CPU, float32) whose numba cache directory (``NUMBA_CACHE_DIR``) starts empty ("cold": the kernel is
compiled) or holds what the cold process wrote ("cached": its machine code is loaded). Every process times, on the
same parameters: the stock trainer's first step (it creates the optimizer states too); the kernel load that
LrTrainer's first CPU step pays once per process (import numba and the kernel module, then the kernel's first call on
a 16-element table: compile or cache load), measured alone here; LrTrainer's first step after it (states, routing);
and the median of its next 5 steps.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

OPTIMIZERS = {"sgd-momentum": ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4}),
              "adam": ("adam", {"learning_rate": 1e-3, "wd": 1e-4})}


def kernel_load(kind: str) -> float:
    """Seconds to import numba and the kernel module and make the first call of ``kind``'s kernel (float32)."""
    import numpy as np

    from gluon_lr._fused.compiled import load_kernels
    start = time.perf_counter()
    kernels = load_kernels()
    w, g, m, v = (np.zeros(16, np.float32) for _ in range(4))
    if kind == "adam":
        kernel, arrays, consts = kernels.adam, (w, g, m, v), np.ones(7, np.float32)
    else:
        kernel, arrays, consts = kernels.sgd_mom, (w, g, m), np.ones(3, np.float32)
    addresses = np.array([[a.ctypes.data for a in arrays]], np.int64)
    kernel(addresses, np.array([16], np.int64), np.ones(1, np.float32), np.ones(1, np.float32), consts, False)
    return time.perf_counter() - start


def measure(kind: str) -> dict:
    """In this process: seconds of the stock first step, the kernel load, LrTrainer's first step and its warm
    steps."""
    import mxnet as mx
    from mxnet import gluon, nd

    from gluon_lr import LrTrainer, Rule
    mx.random.seed(0)
    net = gluon.model_zoo.vision.resnet50_v1()
    net.initialize(mx.init.Xavier())
    net(nd.zeros((1, 3, 64, 64)))
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    for param in params:
        param.grad()[:] = nd.random.normal(scale=1e-3, shape=param.shape)
    name, hyper = OPTIMIZERS[kind]
    stock = gluon.Trainer(net.collect_params(), name, dict(hyper))
    trainer = LrTrainer(net, name, dict(hyper), rules=[Rule("*", lr_mult=0.1), Rule("*dense*", lr_mult=1.0)])
    nd.waitall()
    times = {}
    for label, step in [("stock first", stock.step), ("load", None)] + [(f"lr {i}", trainer.step) for i in range(6)]:
        if step is None:
            times[label] = kernel_load(kind)
            continue
        for param in params:
            param.data()._fresh_grad = True
        start = time.perf_counter()
        step(1)
        nd.waitall()
        times[label] = time.perf_counter() - start
    return {"stock first": times["stock first"], "load": times["load"], "first": times["lr 0"],
            "warm": statistics.median(times[f"lr {i}"] for i in range(1, 6))}


def child(kind: str, cache_dir: str) -> dict:
    """``measure(kind)`` in a fresh process whose numba cache directory is ``cache_dir``."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, __file__, "--child", kind], env=env, check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Print one table: per optimizer, a cold and a cached process."""
    print(f"{'':26s} {'stock 1st step s':>17s} {'kernel load s':>14s} {'LrTrainer 1st step s':>21s} "
          f"{'LrTrainer warm ms':>18s}")
    for kind in OPTIMIZERS:
        with tempfile.TemporaryDirectory() as cache_dir:
            for state in ("cold", "cached"):
                row = child(kind, cache_dir)
                print(f"{kind + ', ' + state:26s} {row['stock first']:17.3f} {row['load']:14.3f} "
                      f"{row['first']:21.3f} {row['warm'] * 1e3:18.1f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(measure(sys.argv[2])))
    else:
        main()
