"""Benchmark: one training step under dist_sync (update_on_kvstore=True), stock gluon.Trainer vs LrTrainer.

A local cluster on 127.0.0.1 (scheduler, 1 server, 2 workers) per row, started by ``devtools/local_cluster.py``;
``mxnet.gluon.model_zoo.vision.resnet18_v1`` (10 classes, random init, hybridized), synthetic 32x32 data, SGD with
momentum, per-layer multipliers (backbone x0.1). Each worker times ``--steps`` steps after 2 warm-up steps and
reports the median; LrTrainer also changes its learning rate every 5 steps (a table re-sent to the server). All
rows are measured in this one run; the ratio is LrTrainer / stock (what ``_dist.sync`` costs per step).

Note: stock Gluon ignores the multipliers on the server (its numbers are those of lr_mult 1); the row still times
the same work. On a 2-core machine five processes share the cores, so expect noise of a few percent.

Usage: ``python bench/bench_dist_step.py [--steps 20] [--batch 8]``
"""
import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _worker(kind: str, steps: int, batch: int, out: Path) -> None:
    """One worker: time `steps` steps; rank 0 writes ``out/{kind}.json``."""
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.gluon.model_zoo import vision
    from gluon_lr import LrTrainer
    kv = mx.kv.create("dist_sync")
    mx.random.seed(0)
    net = vision.resnet18_v1(classes=10)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    for name, param in net.collect_params().items():
        param.lr_mult = 1.0 if "dense" in name else 0.1
    make = gluon.Trainer if kind == "stock" else LrTrainer
    trainer = make(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, kvstore=kv,
                   update_on_kvstore=True)
    x, y = mx.nd.random.uniform(shape=(batch, 3, 32, 32)), mx.nd.array(list(range(batch)))
    times = []
    for step in range(steps + 2):
        if kind == "lrtrainer" and step % 5 == 4:
            trainer.set_learning_rate(0.1 * 0.9 ** step)
        begin = time.perf_counter()
        with autograd.record():
            loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
        loss.backward()
        trainer.step(2 * batch)
        mx.nd.waitall()
        times.append(time.perf_counter() - begin)
    if kv.rank == 0:
        (out / f"{kind}.json").write_text(json.dumps({"median_s": statistics.median(times[2:])}))


def main() -> None:
    """Run both rows and print the table."""
    from devtools.local_cluster import run_cluster
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for kind in ("stock", "lrtrainer"):
            run_cluster([__file__, "--worker", kind, str(args.steps), str(args.batch), str(out)], out / kind,
                        timeout=600)
        stock, mine = (json.loads((out / f"{k}.json").read_text())["median_s"] for k in ("stock", "lrtrainer"))
    print(f"{'row':<40} {'median step (ms)':>18}")
    print(f"{'gluon.Trainer, dist_sync, on servers':<40} {stock * 1e3:>18.1f}")
    print(f"{'LrTrainer, dist_sync, on servers':<40} {mine * 1e3:>18.1f}")
    print(f"{'ratio LrTrainer / stock':<40} {mine / stock:>18.3f}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        try:
            _worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]))
        except BaseException:  # a failed worker would otherwise hang in the kvstore's finalizer
            import os
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
    else:
        main()
