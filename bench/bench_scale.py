"""Benchmark of migrate at scale: time and peak RSS of name_mapping, convert_weights and write_safetensors for
chains of big Dense/Linear layers, each stage of each size in a fresh process,
with the growth exponent of each time against size.

Run: OMP_NUM_THREADS=2 PYTHONPATH=. python bench/bench_scale.py [--sizes 10,25,50,100] [--width 2048]

Sizes are in millions of parameters (depth = size / width^2); each stage runs in its own fresh process.
"models" is the RSS of the two built models (MXNet and torch) over the bare interpreter; each stage's "+peak"
is its peak RSS above what was resident before it, in
GiB, and "/weights" that peak over the weights' bytes (the target for conversion is <= 1.25). RSS is sampled
every 5 ms from /proc/self/status, so very short peaks can be missed. Check `free -g` before large sizes: a size
of N million needs about 8*N bytes for the two models alone.
"""
import argparse
import math
import multiprocessing as mp
import os
import tempfile
import threading
import time
import warnings

warnings.filterwarnings("ignore")
GIB = 1024 ** 3


def _rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class _Peak:
    """Peak RSS above the RSS at entry, sampled in a thread."""

    def __enter__(self):
        self.base = self.peak = _rss()
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        self.start = time.perf_counter()
        return self

    def _sample(self):
        while self.running:
            self.peak = max(self.peak, _rss())
            time.sleep(0.005)

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, _rss())
        self.above = (self.peak - self.base) / GIB


def _one(millions, width, stage_name, mapping_path, queue):
    import mxnet as mx
    import torch
    from migrate.mapping.name_mapping import name_mapping
    from migrate.mapping.stream import write_safetensors
    from migrate.mapping.weights import convert_weights
    bare = _rss()
    depth = max(1, round(millions * 1e6 / (width * width + width)))
    net = mx.gluon.nn.HybridSequential(prefix="chain_")
    with net.name_scope():
        for _ in range(depth):
            net.add(mx.gluon.nn.Dense(width, in_units=width))
    net.initialize(mx.init.Uniform(0.01))
    with torch.no_grad():
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)])
    params = {p.name: p.data() for p in net.collect_params().values()}
    count = sum(int(v.size) for v in params.values())
    weights = count * 4
    models = (_rss() - bare) / GIB
    row = {"params_M": count / 1e6, "depth": depth, "models_GiB": models}
    if stage_name == "map":
        with _Peak() as stage:
            mapping = name_mapping(net, model, [(1, width)])
        mapping.save(mapping_path)
        row.update(map_s=stage.seconds, map_GiB=stage.above)
    elif stage_name == "convert":
        from migrate.mapping.table import NameMapping
        mapping = NameMapping.load(mapping_path)
        with _Peak() as stage:
            converted = convert_weights(params, mapping, model)
        row.update(convert_s=stage.seconds, convert_GiB=stage.above, convert_x=stage.above * GIB / weights)
        del converted
    else:
        from migrate.mapping.table import NameMapping
        mapping = NameMapping.load(mapping_path)
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as folder:
            with _Peak() as stage:
                write_safetensors(params, mapping, os.path.join(folder, "weights.safetensors"), model)
        row.update(write_s=stage.seconds, write_GiB=stage.above, write_x=stage.above * GIB / weights)
    queue.put(row)


def _exponent(xs, ys):
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    mx_, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((x - mx_) ** 2 for x in lx)
    return sum((x - mx_) * (y - my) for x, y in zip(lx, ly)) / den if den else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,25,50,100", help="millions of parameters, comma separated")
    parser.add_argument("--width", type=int, default=2048)
    args = parser.parse_args()
    context = mp.get_context("spawn")
    rows = []
    print(f"{'params':>8} {'depth':>5} {'models':>7} | {'map s':>7} {'+peak':>6} | {'convert s':>9} {'+peak':>6} "
          f"{'/weights':>8} | {'write s':>7} {'+peak':>6} {'/weights':>8}")
    for size in [float(s) for s in args.sizes.split(",")]:
        r, failed = {}, False
        with tempfile.TemporaryDirectory() as folder:
            for stage_name in ("map", "convert", "write"):  # each stage in a fresh process: RSS not reused
                queue = context.Queue()
                child = context.Process(target=_one, args=(size, args.width, stage_name,
                                                           os.path.join(folder, "mapping.json"), queue))
                child.start()
                part = queue.get() if child.is_alive() or not child.join() else None
                child.join()
                if child.exitcode != 0 or part is None:
                    print(f"{size:>7.0f}M {stage_name} failed (exit {child.exitcode}; out of memory?)")
                    failed = True
                    break
                r.update(part)
        if failed:
            break
        rows.append(r)
        print(f"{r['params_M']:>7.1f}M {r['depth']:>5} {r['models_GiB']:>6.2f}G | {r['map_s']:>7.2f} "
              f"{r['map_GiB']:>5.2f}G | {r['convert_s']:>9.2f} {r['convert_GiB']:>5.2f}G {r['convert_x']:>8.2f} | "
              f"{r['write_s']:>7.2f} {r['write_GiB']:>5.2f}G {r['write_x']:>8.2f}", flush=True)
    if len(rows) >= 2:
        xs = [r["params_M"] for r in rows]
        print("growth exponent of time against size: " + ", ".join(
            f"{k[:-2]} {_exponent(xs, [r[k] for r in rows]):.2f}" for k in ("map_s", "convert_s", "write_s")))


if __name__ == "__main__":
    main()
