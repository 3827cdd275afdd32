"""Speed of generated modules against their hand-written twins: one train step and one eval forward, as a table.

The GPU table (issue 35's targets: within 1.03x of the twin, batch 64, float32 and bf16 autocast, cudnn.benchmark):

    here (./.venv, MXNet):  python -m devtools.generated_speed prepare build/generated_speed
    there (a GPU, torch):   python3 -m devtools.generated_speed run build/generated_speed [--batch 64] [--repeat 20]

(``build/`` is ignored by git: a device run carries ``build/generated_speed``; torch and torchvision are all the run
needs, about 3 minutes on an H100.)

``prepare`` writes the modules ``generate_torch`` makes for model-zoo resnet18_v1 and resnet50_v1 (files only: the
timing needs no weights, each module starts with torch's initialization); ``run`` imports them (torch only) and times
each against torchvision's resnet18 / resnet50 on CUDA (``cudnn.benchmark``, TF32 as torch's defaults leave it),
float32 and bfloat16 under ``torch.autocast``. bench/bench_generated.py prints the same table on the CPU.

Rows: "train" is forward, a summed loss, backward and a plain SGD step (``torch.optim.SGD``, the same for both);
"eval" a forward under ``torch.no_grad()`` in eval mode. Generated and twin run alternately, ``--repeat`` times
after warm-up rounds, each timed to the device's completion; the table gives the medians and their ratio
(generated / twin). The v1 networks put a bottleneck's stride on its first 1x1 convolution, torchvision on the 3x3
one: resnet50's convolutions cost slightly differently.
"""
import argparse
import importlib.util
import os
import statistics
import sys
import time

MODELS = {"resnet18_v1": "resnet18", "resnet50_v1": "resnet50"}


def prepare(out: str) -> None:
    """Write ``out/<model>.py`` for each model of ``MODELS`` (needs MXNet: run in ./.venv)."""
    import mxnet as mx
    from mxnet.gluon.model_zoo import vision

    from migrate.generate import generate_torch
    os.makedirs(out, exist_ok=True)
    for name in MODELS:
        net = getattr(vision, name)(classes=1000)
        mx.random.seed(0)
        net.initialize(mx.init.Xavier())
        generate_torch(net, (1, 3, 224, 224), os.path.join(out, f"{name}.py"))
        print(f"wrote {os.path.join(out, name + '.py')}")


def pair(folder: str, name: str) -> tuple:
    """(the generated module of ``folder/<name>.py``, torchvision's twin), each freshly initialized by torch."""
    import torchvision
    spec = importlib.util.spec_from_file_location(f"generated_{name}", os.path.join(folder, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    generated = next(v for v in vars(module).values() if isinstance(v, type) and hasattr(v, "MXNET_NAMES"))
    return generated(), getattr(torchvision.models, MODELS[name])()


def _step(model, x, train: bool, dtype, optimizer) -> None:
    import torch
    autocast = torch.autocast(x.device.type, dtype=dtype, enabled=dtype is not torch.float32)
    if not train:
        with torch.no_grad(), autocast:
            model(x)
        return
    with autocast:
        loss = model(x).float().sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def timed(models, x, train: bool, dtype, repeat: int, warmup: int = 1) -> tuple:
    """Median seconds of one step of each of ``models`` (run alternately on ``x``'s device)."""
    import torch
    runs = [(m.train(train), torch.optim.SGD(m.parameters(), lr=1e-6)) for m in models]
    times = [[] for _ in runs]
    for k in range(warmup + repeat):
        for i, (model, optimizer) in enumerate(runs):
            if x.is_cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            _step(model, x, train, dtype, optimizer)
            if x.is_cuda:
                torch.cuda.synchronize()
            if k >= warmup:
                times[i].append(time.perf_counter() - start)
    return tuple(statistics.median(t) for t in times)


def table(folder: str, device: str, batch: int, size: int, repeat: int, warmup: int, dtypes) -> None:
    """Print one row per model, dtype and pass: generated ms, twin ms, ratio, and the load average before it."""
    import torch
    x = torch.randn(batch, 3, size, size, device=device)
    print(f"{device}, batch {batch}, {size}x{size}, median of {repeat}; torch {torch.__version__}")
    print(f"{'model':12} {'dtype':9} {'pass':5} {'generated ms':>12} {'twin ms':>9} {'ratio':>6} {'load':>5}")
    for name in MODELS:
        models = [m.to(device) for m in pair(folder, name)]
        for dtype in dtypes:
            for train in (True, False):
                load = os.getloadavg()[0]
                generated, twin = timed(models, x, train, dtype, repeat, warmup)
                print(f"{name:12} {str(dtype).split('.')[1]:9} {'train' if train else 'eval':5} "
                      f"{generated * 1e3:12.2f} {twin * 1e3:9.2f} {generated / twin:6.3f} {load:5.1f}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["prepare", "run"])
    parser.add_argument("folder")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.folder)
        return 0
    import torch
    if not torch.cuda.is_available():
        print("no CUDA device: the CPU table is bench/bench_generated.py", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    table(args.folder, "cuda", args.batch, args.size, args.repeat, 5, [torch.float32, torch.bfloat16])
    return 0


if __name__ == "__main__":
    sys.exit(main())
