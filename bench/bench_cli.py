"""Benchmark of the ``migrate`` command on a real pair: model-zoo resnet18_v1 against torchvision's resnet18.

Run: OMP_NUM_THREADS=2 PYTHONPATH=. python bench/bench_cli.py [--size 64]

Trains resnet18_v1 two steps with LrTrainer (sgd + momentum, head lr_mult 10, first stage frozen), exports the
files, then times each subcommand in this process (imports already done) and prints one table: seconds per
subcommand, its exit code, and its share of ``all``. ``groups``/``weights``/``optim``/``verify`` take the mapping
file that ``map`` wrote, so they do not match the models again. One untimed ``map`` first pays the one-time costs
(lazy imports, first ONNX export).
"""
import argparse
import os
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")


def _files(folder, size):
    import mxnet as mx
    from mxnet import autograd
    from gluon_lr import LrTrainer, Rule
    net = mx.gluon.model_zoo.vision.resnet18_v1(classes=10)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = LrTrainer(net, "sgd", {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-4},
                        rules=[Rule("resnetv10_dense0_*", lr_mult=10.0), Rule("resnetv10_stage1_*", freeze=True)])
    x, y = mx.nd.random.normal(shape=(2, 3, size, size)), mx.nd.array([1, 3])
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    for _ in range(2):
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(2)
    net.export(os.path.join(folder, "r18"))
    trainer.export_settings(os.path.join(folder, "settings.json"))
    trainer.save_states(os.path.join(folder, "trainer.states"))


def _commands(folder, size):
    f = {k: os.path.join(folder, v) for k, v in (("symbol", "r18-symbol.json"), ("params", "r18-0000.params"),
                                                 ("settings", "settings.json"), ("states", "trainer.states"),
                                                 ("mapping", "mapping.json"))}
    torch_model = ["--torch", "torchvision.models:resnet18", "--kwargs", '{"num_classes": 10}']
    shape = ["--input-shape", f"1,3,{size},{size}"]
    mx_files = ["--symbol", f["symbol"], "--params", f["params"]]
    return [
        ("map", ["map", *mx_files, *torch_model, *shape, "--out", f["mapping"]]),
        ("groups", ["groups", "--settings", f["settings"], *torch_model, "--mapping", f["mapping"], "--out",
                    os.path.join(folder, "groups.json")]),
        ("weights", ["weights", "--params", f["params"], *torch_model, "--mapping", f["mapping"], "--out",
                     os.path.join(folder, "weights.pt")]),
        ("optim", ["optim", "--settings", f["settings"], "--states", f["states"], *torch_model, "--mapping",
                   f["mapping"], "--out", os.path.join(folder, "optimizer.pt")]),
        ("verify", ["verify", *mx_files, *torch_model, *shape, "--mapping", f["mapping"]]),
        ("all", ["all", *mx_files, "--settings", f["settings"], "--states", f["states"], *torch_model, *shape,
                 "--out", os.path.join(folder, "out")]),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=64, help="input height and width")
    size = parser.parse_args().size
    import contextlib
    import io

    from migrate.cli import main as migrate_main
    with tempfile.TemporaryDirectory() as folder:
        _files(folder, size)
        rows, commands = [], _commands(folder, size)
        for name, argv in [("warm-up", commands[0][1][:-1] + [os.path.join(folder, "warm.json")])] + commands:
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                code = migrate_main(argv)
            rows.append((name, time.perf_counter() - start, code))
    total = dict((n, s) for n, s, _ in rows)["all"]
    print(f"migrate subcommands, resnet18_v1 vs torchvision resnet18, input 1x3x{size}x{size}, one run each")
    print(f"{'subcommand':<10} {'seconds':>8} {'exit':>5} {'of all':>7}")
    for name, seconds, code in rows[1:]:
        print(f"{name:<10} {seconds:>8.2f} {code:>5} {seconds / total:>7.2f}")


if __name__ == "__main__":
    main()
