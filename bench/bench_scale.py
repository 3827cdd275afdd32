"""Benchmark of migrate at scale: time and peak RSS of name_mapping, convert_weights, write_safetensors and the
whole `migrate all` command for chains of big Dense/Linear layers, each stage of each size in a fresh process,
with the growth exponent of each time against size.

Run: OMP_NUM_THREADS=2 PYTHONPATH=. python bench/bench_scale.py [--sizes 10,25,50,100] [--width 2048]
         [--stages map,convert,file,write,all] [--resnet50]
     OMP_NUM_THREADS=2 PYTHONPATH=. python bench/bench_scale.py --sizes 671 --width 8192 --stages shard [--ranks 2]

"shard" (``--stages shard --ranks 2``, no MXNet needed: runs in ./.venv-torch too) writes a migration folder of the
chain (``weights.safetensors``; ``optimizer.pt`` with the exact SGD's momentum state, whose buffers hold the weights'
values) with migrate's writers, then starts ``--ranks`` gloo ranks that each build the chain on the meta device,
shard it with FSDP2's ``fully_shard``, allocate their shards and call ``load_migration``; each rank prints its peak
RSS (``VmHWM``) above its RSS before the model, against the bound (weights + state) / ranks + the largest tensor.

"file" converts from a ``.params`` file (``mx.nd.save`` of the same weights) instead of the live NDArrays: read
without MXNet, one array at a time. "all" writes the MXNet files (symbol, params, LrTrainer settings) in one process,
then runs `migrate all` on them in another: its "peak" is that process's whole peak RSS (the MXNet params it reads and
the torch model it builds included), "exit" its exit code. ``--resnet50`` first prints the mapping time of resnet50
(exports included).

Sizes are in millions of parameters (depth = size / width^2); each stage runs in its own fresh process.
"models" is the RSS of the two built models (MXNet and torch) over the bare interpreter; each stage's "+peak"
is its peak RSS above what was resident before it, in
GiB, and "/weights" that peak over the weights' bytes (the target for conversion is <= 1.1). RSS is sampled
every 5 ms from /proc/self/status, so very short peaks can be missed. Check `free -g` before large sizes: a size
of N million needs about 8*N bytes for the two models alone.
"""
import argparse
import contextlib
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


def chain_model(depth: int, width: int):
    """The torch twin of the bench's MXNet chain (``--torch bench.bench_scale:chain_model`` for `migrate all`): its
    weights are left uninitialized (``skip_init``), as migrate overwrites every one."""
    import torch
    return torch.nn.Sequential(*[torch.nn.utils.skip_init(torch.nn.Linear, width, width) for _ in range(depth)])


def _mx_chain(depth, width):
    import mxnet as mx
    net = mx.gluon.nn.HybridSequential(prefix="chain_")
    with net.name_scope():
        for _ in range(depth):
            net.add(mx.gluon.nn.Dense(width, in_units=width))
    net.initialize(mx.init.Uniform(0.01))
    return net


def _depth(millions, width):
    return max(1, round(millions * 1e6 / (width * width + width)))


def _one(millions, width, stage_name, folder, queue):
    """One stage for one size, in this (fresh) process; puts its row on ``queue``."""
    from migrate.mapping.name_mapping import name_mapping
    from migrate.mapping.stream import write_safetensors
    from migrate.mapping.table import NameMapping
    from migrate.mapping.weights import convert_weights
    bare, depth = _rss(), _depth(millions, width)
    net, model = _mx_chain(depth, width), chain_model(depth, width)
    params = {p.name: p.data() for p in net.collect_params().values()}
    count = sum(int(v.size) for v in params.values())
    weights = count * 4
    for tensor in model.state_dict().values():  # resident, as a built model is
        tensor.zero_()
    import mxnet as mx
    mx.nd.waitall()  # MXNet initializes asynchronously: its weights are resident only once the engine ran
    models = (_rss() - bare) / GIB
    row = {"params_M": count / 1e6, "depth": depth, "models_GiB": models}
    mapping_path = os.path.join(folder, "mapping.json")
    if stage_name == "map":
        with _Peak() as stage:
            mapping = name_mapping(net, model, [(1, width)])
        mapping.save(mapping_path)
        row.update(map_s=stage.seconds, map_GiB=stage.above)
    elif stage_name == "convert":
        mapping = NameMapping.load(mapping_path)
        with _Peak() as stage:
            converted = convert_weights(params, mapping, model)
        row.update(convert_s=stage.seconds, convert_GiB=stage.above, convert_x=stage.above * GIB / weights)
        del converted
    elif stage_name == "file":
        mapping = NameMapping.load(mapping_path)
        path = os.path.join(folder, "chain-0000.params")
        mx.nd.save(path, {"arg:" + name: value for name, value in params.items()})
        with _Peak() as stage:
            from_file = convert_weights(path, mapping, model)
        row.update(file_s=stage.seconds, file_GiB=stage.above, file_x=stage.above * GIB / weights)
        del from_file
    else:
        mapping = NameMapping.load(mapping_path)
        with tempfile.TemporaryDirectory(dir=folder) as out:
            with _Peak() as stage:
                write_safetensors(params, mapping, os.path.join(out, "weights.safetensors"), model)
        row.update(write_s=stage.seconds, write_GiB=stage.above, write_x=stage.above * GIB / weights)
    queue.put(row)


def _files(millions, width, folder, queue):
    """The inputs of `migrate all` for one size: symbol, params and settings files (LrTrainer sgd, lr_mult 0.1 on
    the first layer). Written without gradients, forward pass or kvstore, which would triple this process's memory."""
    import mxnet as mx

    from gluon_lr import LrTrainer, Rule
    depth = _depth(millions, width)
    net = mx.gluon.nn.HybridSequential(prefix="chain_")
    with net.name_scope():
        for _ in range(depth):
            net.add(mx.gluon.nn.Dense(width, in_units=width))
    net.collect_params().setattr("grad_req", "null")
    net.initialize(mx.init.Uniform(0.01))
    trainer = LrTrainer(net, "sgd", {"learning_rate": 0.01}, rules=[Rule("chain_dense0_*", lr_mult=0.1)],
                        kvstore=None)
    net(mx.sym.var("data")).save(os.path.join(folder, "chain-symbol.json"))
    mx.nd.save(os.path.join(folder, "chain-0000.params"),
               {"arg:" + p.name: p.data() for p in net.collect_params().values()})
    trainer.export_settings(os.path.join(folder, "settings.json"))
    queue.put({"depth": depth, "params_M": depth * (width * width + width) / 1e6})


def _all(millions, width, folder, queue):
    """`migrate all` on the files of ``_files``, in this process: time, peak RSS, exit code."""
    from migrate.cli import main
    depth = _depth(millions, width)
    argv = ["all", "--symbol", os.path.join(folder, "chain-symbol.json"), "--params",
            os.path.join(folder, "chain-0000.params"), "--settings", os.path.join(folder, "settings.json"),
            "--torch", "bench.bench_scale:chain_model", "--kwargs", f'{{"depth": {depth}, "width": {width}}}',
            "--input-shape", f"1,{width}", "--out", os.path.join(folder, "migrated"), "--quiet"]
    with _Peak() as stage, open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), \
            contextlib.redirect_stderr(quiet):
        code = main(argv)
    size = os.path.getsize(os.path.join(folder, "migrated", "weights.safetensors")) if code == 0 else 0
    queue.put({"all_s": stage.seconds, "all_GiB": stage.peak / GIB, "all_code": code, "all_file_GiB": size / GIB})


def _shard_folder(millions, width, folder, queue):
    """A migration folder of the chain, as `migrate all` writes it (weights.safetensors, optimizer.pt of the exact SGD
    with momentum), made without MXNet: the momentum buffers share the weights' memory (the file holds them twice)."""
    import torch

    import migrate
    from migrate.mapping.stream import write_state_dict
    from migrate.migration_folder import optimizer_document
    depth, ranks = _depth(millions, width), int(os.environ["BENCH_RANKS"])
    model = chain_model(depth, width)
    for tensor in model.state_dict().values():
        torch.nn.init.uniform_(tensor, -0.01, 0.01)
    mapping = {f"chain_dense{i}_{kind}": f"{i}.{kind}" for i in range(depth) for kind in ("weight", "bias")}
    params = {name: {"index": i, "shape": list(model.get_parameter(key).shape), "dtype": "float32",
                     "lr_mult": 0.1 if name.startswith("chain_dense0_") else 1.0, "wd_mult": 1.0, "frozen": False,
                     "masked_elements": 0} for i, (name, key) in enumerate(mapping.items())}
    settings = {"format": "gluon-lr-settings", "schema_version": 1, "lr_scheduler": None, "num_update": 3,
                "num_devices": ranks, "params": params,
                "optimizer": {"name": "sgd", "learning_rate": 0.01, "wd": 1e-4, "rescale_grad": 1 / 32,
                              "clip_gradient": None, "multi_precision": False,
                              "hyperparameters": {"momentum": 0.9}}}
    optimizer = migrate.torch_optimizer(model, settings, mapping)
    for param in model.parameters():
        optimizer.state[param] = {"step": 3, "momentum_buffer": param.detach()}
    document = optimizer_document(optimizer, migrate.torch_lr_scheduler(optimizer, settings), settings, mapping)
    torch.save(document, os.path.join(folder, "optimizer.pt"))  # streamed: the atomic writer would copy it in memory
    write_state_dict(model.state_dict(), os.path.join(folder, "weights.safetensors"))
    sizes = [t.numel() * t.element_size() for t in model.state_dict().values()]
    queue.put({"params_M": sum(sizes) / 4e6, "depth": depth, "weights_GiB": sum(sizes) / GIB,
               "state_GiB": sum(sizes) / GIB, "largest_GiB": max(sizes) / GIB})


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _rank_load(folder, depth, width):
    """One rank of the "shard" stage: the chain on the meta device, fully_shard, its shards allocated, load_migration;
    prints one JSON line of its RSS figures."""
    import json

    import torch
    import torch.distributed.tensor  # noqa: F401 (imported before the baseline, as fully_shard's module)
    from torch.distributed.fsdp import fully_shard

    import migrate
    from devtools import torch_ranks
    rank, world = torch_ranks.init_gloo(timeout=600)
    before = _rss()  # the libraries imported, the process group up: what follows is the model and its loading
    with torch.device("meta"):
        model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(depth)])
    fully_shard(model)
    model.to_empty(device="cpu")
    start = time.perf_counter()
    optimizer, _ = migrate.load_migration(folder, model)
    seconds = time.perf_counter() - start
    held = sum(p.to_local().numel() * 4 for p in model.parameters())
    held += sum(s["momentum_buffer"].to_local().numel() * 4 for s in optimizer.state.values() if "momentum_buffer" in s)
    print(json.dumps({"rank": rank, "before_GiB": before / GIB, "peak_GiB": _status("VmHWM") / GIB,
                      "held_GiB": held / GIB, "load_s": seconds}), flush=True)
    torch_ranks.finish()


def _shard(millions, width, ranks, folder):
    """The "shard" stage: the folder in a child process, then ``ranks`` gloo ranks loading it; one row per rank."""
    from pathlib import Path

    from devtools.local_cluster import run_torch_ddp
    os.environ["BENCH_RANKS"] = str(ranks)
    made = _in_child(_shard_folder, millions, width, folder)
    if made is None:
        return None
    argv = [os.path.abspath(__file__), "--rank-load", folder, str(made["depth"]), str(width)]
    texts = run_torch_ddp(argv, Path(folder) / "logs", world_size=ranks, timeout=1800)
    rows = [dict(made, **json_line(text)) for text in texts]
    bound = (made["weights_GiB"] + made["state_GiB"]) / ranks + made["largest_GiB"]
    for row in rows:
        row.update(above_GiB=row["peak_GiB"] - row["before_GiB"], bound_GiB=bound)
    return rows


def json_line(text: str) -> dict:
    """The last line of a rank's output, a JSON object."""
    import json
    return json.loads(text.strip().splitlines()[-1])


def _print_shard(rows, ranks) -> None:
    print(f"{'params':>8} {'weights':>8} {'state':>7} {'largest':>8} | {'rank':>4} {'before':>7} {'peak RSS':>8} "
          f"{'+peak':>7} {'held':>7} {'bound':>7} {'load s':>7} | (weights + state) / {ranks} + largest")
    for r in rows:
        met = "met" if r["above_GiB"] <= r["bound_GiB"] else "NOT met"
        print(f"{r['params_M']:>7.0f}M {r['weights_GiB']:>7.2f}G {r['state_GiB']:>6.2f}G {r['largest_GiB']:>7.2f}G | "
              f"{r['rank']:>4} {r['before_GiB']:>6.2f}G {r['peak_GiB']:>7.2f}G {r['above_GiB']:>6.2f}G "
              f"{r['held_GiB']:>6.2f}G {r['bound_GiB']:>6.2f}G {r['load_s']:>7.1f} | {met}", flush=True)


def _in_child(target, *args):
    """Run ``target(*args, queue)`` in a fresh process; its row, or None when it failed (out of memory?)."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=target, args=(*args, queue))
    child.start()
    row = None
    while child.is_alive() or not queue.empty():
        try:
            row = queue.get(timeout=1)
            break
        except Exception:  # queue.Empty
            continue
    child.join()
    return row if child.exitcode == 0 else None


def _resnet50_mapping(repeat=3):
    """Best of ``repeat`` times of name_mapping (both exports included) for model-zoo resnet50_v1 vs torchvision's."""
    import mxnet as mx
    import torchvision
    from mxnet.gluon.model_zoo import vision

    from migrate.mapping.name_mapping import name_mapping
    net = vision.resnet50_v1()
    net.initialize()
    net(mx.nd.zeros((1, 3, 224, 224)))
    model = torchvision.models.resnet50()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        name_mapping(net, model, (1, 3, 224, 224))
        times.append(time.perf_counter() - start)
    return min(times)


def _exponent(xs, ys):
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    mx_, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((x - mx_) ** 2 for x in lx)
    return sum((x - mx_) * (y - my) for x, y in zip(lx, ly)) / den if den else float("nan")


def _fmt(row, key, spec, width):
    return format(row[key], spec) if key in row else "-".rjust(width)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,25,50,100", help="millions of parameters, comma separated")
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--stages", default="map,convert,write", help="of map, convert, file, write, all")
    parser.add_argument("--resnet50", action="store_true", help="also time resnet50's mapping (target <= 0.5 s)")
    parser.add_argument("--ranks", type=int, default=2, help="gloo ranks of the shard stage")
    parser.add_argument("--rank-load", nargs=3, help=argparse.SUPPRESS)  # one rank of the shard stage
    args = parser.parse_args()
    if args.rank_load:
        _rank_load(args.rank_load[0], int(args.rank_load[1]), int(args.rank_load[2]))
        return
    stages = args.stages.split(",")
    if stages == ["shard"]:
        for size in [float(s) for s in args.sizes.split(",")]:
            with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as folder:
                rows = _shard(size, args.width, args.ranks, folder)
            if rows is None:
                print(f"{size:>7.0f}M shard failed (out of memory?)")
                break
            _print_shard(rows, args.ranks)
        return
    if args.resnet50:
        seconds = _resnet50_mapping()
        print(f"resnet50_v1 vs torchvision resnet50, name_mapping with both exports: {seconds:.3f} s "
              f"(target <= 0.5 s: {'met' if seconds <= 0.5 else 'NOT met'})")
    rows = []
    print(f"{'params':>8} {'depth':>5} {'models':>7} | {'map s':>7} {'+peak':>6} | {'convert s':>9} {'+peak':>6} "
          f"{'/weights':>8} | {'file s':>7} {'+peak':>6} {'/weights':>8} | {'write s':>7} {'+peak':>6} {'/weights':>8} "
          f"| {'all s':>7} {'peak':>6} {'exit':>4}")
    for size in [float(s) for s in args.sizes.split(",")]:
        r, failed = {}, None
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as folder:
            for stage_name in [s for s in ("map", "convert", "file", "write") if s in stages]:
                if stage_name != "map" and "map_s" not in r:  # convert/write read the mapping map wrote
                    part = _in_child(_one, size, args.width, "map", folder)
                    r.update({k: v for k, v in (part or {}).items() if not k.startswith("map")})
                part = _in_child(_one, size, args.width, stage_name, folder)
                if part is None:
                    failed = stage_name
                    break
                r.update(part)
            if failed is None and "all" in stages:
                made = _in_child(_files, size, args.width, folder)
                part = made and _in_child(_all, size, args.width, folder)
                if part is None:
                    failed = "all"
                else:
                    r.update(part, params_M=made["params_M"], depth=made["depth"])
        if failed is not None:
            print(f"{size:>7.0f}M {failed} failed (out of memory?)")
            break
        rows.append(r)
        print(f"{r['params_M']:>7.1f}M {r['depth']:>5} {_fmt(r, 'models_GiB', '>6.2f', 6)}G | "
              f"{_fmt(r, 'map_s', '>7.2f', 7)} {_fmt(r, 'map_GiB', '>5.2f', 5)}G | "
              f"{_fmt(r, 'convert_s', '>9.2f', 9)} {_fmt(r, 'convert_GiB', '>5.2f', 5)}G "
              f"{_fmt(r, 'convert_x', '>8.2f', 8)} | {_fmt(r, 'file_s', '>7.2f', 7)} "
              f"{_fmt(r, 'file_GiB', '>5.2f', 5)}G {_fmt(r, 'file_x', '>8.2f', 8)} | {_fmt(r, 'write_s', '>7.2f', 7)} "
              f"{_fmt(r, 'write_GiB', '>5.2f', 5)}G {_fmt(r, 'write_x', '>8.2f', 8)} | "
              f"{_fmt(r, 'all_s', '>7.1f', 7)} {_fmt(r, 'all_GiB', '>5.1f', 5)}G {_fmt(r, 'all_code', '>4d', 4)}",
              flush=True)
    if len(rows) >= 2:
        xs = [r["params_M"] for r in rows]
        keys = [k for k in ("map_s", "convert_s", "file_s", "write_s", "all_s") if all(k in r for r in rows)]
        print("growth exponent of time against size: " + ", ".join(
            f"{k[:-2]} {_exponent(xs, [r[k] for r in rows]):.2f}" for k in keys))


if __name__ == "__main__":
    main()
