"""Tutorial 8: your own torch twin of an MXNet model, checked training step by training step.

The story. You rewrote your MXNet CNN in torch by hand, and after the migration the loss curves part. Two lines of
the twin are wrong: the BatchNorm got MXNet's ``momentum=0.9`` copied over (torch's momentum weighs the NEW batch:
MXNet's 0.9 is torch's 0.1), and the average pooling was written with ``count_include_pad=False`` (MXNet counts the
padded zeros in the average). ``migrate check`` trains both models on one batch, compares every forward output, the
loss and every gradient, then every weight, momentum buffer and running statistic after each step, and names the
first tensor that differs with its likely cause. Each row also shows its ``control``: how far rounding moves that
tensor when each framework trains against itself with its weights times 1 + 1e-5 x noise; a difference counts only
beyond the tolerance and beyond 10x that, so an exact twin passes in float32 and a wrong setting stands hundreds of
times above it. One fix at a time:

1. MXNet trains N steps (LrTrainer, momentum SGD, weight decay off for biases and norms) and exports what ``migrate``
   reads.
2. ``migrate check`` on the wrong twin: the first divergence is the conv after the pooling, with its cause.
3. The pooling fixed: the first divergence moves to the first BatchNorm's running mean after step 1, with its cause.
4. The momentum fixed: every forward output, gradient, weight and momentum buffer is equal; only the running
   variances differ, because torch's stock BatchNorm updates them with the unbiased batch variance (n/(n-1)), which
   only eval mode reads. ``--torch generate`` (a torch module written from the MXNet graph) follows MXNet there too:
   exit 0.

Run: ``python -m tutorials.t08_check [--steps 6] [--out tutorial_output/t08] [--fast]``. Writes under ``--out``:
``mxnet/`` (what migrate reads), ``check-N.txt`` (each check's table) and ``summary.json``.
"""
import contextlib
import io
import os
import shlex
import sys
import time

from tutorials import _common

import mxnet as mx  # noqa: E402
import torch  # noqa: E402
from mxnet import gluon  # noqa: E402

from gluon_lr import LrTrainer, Rule  # noqa: E402

CLASSES, BATCH, SHAPE = 4, 8, (3, 6, 6)
INPUT_SHAPE = f"{BATCH},{','.join(str(d) for d in SHAPE)}"
CHECK_STEPS = 2
TWINS = [("the twin as written", '{"momentum": 0.9, "count_include_pad": false}'),
         ("pooling fixed", '{"momentum": 0.9}'),
         ("momentum fixed too", "{}")]


class SmallNet(gluon.HybridBlock):
    """conv-bn-relu, 3x3 average pooling over padding, conv-bn-relu, global pooling, dense."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv1, self.bn1 = gluon.nn.Conv2D(8, 3, padding=1, use_bias=False), gluon.nn.BatchNorm()
            self.pool = gluon.nn.AvgPool2D(3, strides=1, padding=1)
            self.conv2, self.bn2 = gluon.nn.Conv2D(8, 3, padding=1, use_bias=False), gluon.nn.BatchNorm()
            self.head = gluon.nn.Dense(CLASSES)

    def hybrid_forward(self, F, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.head(F.Pooling(x, global_pool=True, kernel=(1, 1), pool_type="avg"))


class TorchTwin(torch.nn.Module):
    """The hand-written torch twin of ``SmallNet`` (what ``--torch tutorials.t08_check:TorchTwin`` builds)."""

    def __init__(self, momentum=0.1, count_include_pad=True):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(8, momentum=momentum)
        self.pool = torch.nn.AvgPool2d(3, 1, 1, count_include_pad=count_include_pad)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(8, momentum=momentum)
        self.head = torch.nn.Linear(8, CLASSES)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def mxnet_phase(steps: int, folder: str, log=sys.stderr) -> None:
    """Train ``steps`` steps and write migrate's inputs (symbol, params, settings, states) to ``folder``."""
    mx.random.seed(0)
    net = SmallNet(prefix="small_")
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = LrTrainer(net, "sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-4},
                        rules=[Rule("*bias", wd_mult=0.0), Rule("*beta", wd_mult=0.0), Rule("*gamma", wd_mult=0.0)],
                        kvstore=None)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for data, label in _common.synthetic_batches(steps, CLASSES, SHAPE, BATCH):
        _common.train_step(net, trainer, loss_fn, data, label, mx.cpu())
    os.makedirs(folder, exist_ok=True)
    net.export(os.path.join(folder, "net"))
    trainer.export_settings(os.path.join(folder, "settings.json"))
    trainer.save_states(os.path.join(folder, "trainer.states"))
    print(f"MXNet: {steps} steps done, migrate's inputs written to {folder}/", file=log)


def check_args(mx_folder: str, torch_spec: str, kwargs: str = "{}") -> list:
    """The ``migrate check`` arguments (run as ``python -m migrate ARGS`` in a shell)."""
    files = {"symbol": "net-symbol.json", "params": "net-0000.params", "settings": "settings.json",
             "states": "trainer.states"}
    args = ["check"] + [x for flag, name in files.items() for x in (f"--{flag}", os.path.join(mx_folder, name))]
    args += ["--torch", torch_spec] + (["--kwargs", kwargs] if kwargs != "{}" else [])
    return args + ["--input-shape", INPUT_SHAPE, "--steps", str(CHECK_STEPS)]


def run_check(args: list) -> tuple:
    """(exit code, the table migrate printed, its JSON check section) of one ``migrate check``."""
    import json
    from migrate.cli import main as migrate_main
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
        code = migrate_main(args + ["--json"])
    document = json.loads(printed.getvalue())
    with contextlib.redirect_stdout(io.StringIO()) as table, contextlib.redirect_stderr(io.StringIO()):
        migrate_main(args)
    return code, table.getvalue(), document["check"]


def shown(table: str) -> str:
    """The table's header, its diverging rows (at most 6) and the lines under it (the control runs' rule, the first
    divergence and its cause, the verdict)."""
    lines = table.splitlines()
    header = [line for line in lines if line.startswith("MXNet node")][:1]
    rows = [line for line in lines if "DIVERGES" in line] or ["(no row diverges)"]
    tail = [line for line in lines if line.startswith(("control:", "first divergence", "  likely cause",
                                                        "training check"))]
    return "\n".join(header + rows[:6] + ([f"... ({len(rows) - 6} more diverging rows)"] if len(rows) > 6 else [])
                     + tail)


def main(argv=None) -> int:
    """Run tutorial 8: MXNet N steps -> ``migrate check`` on a wrong twin, fixed twice, and on a generated module.

    Args:
        argv: Command-line arguments (None reads sys.argv).

    Returns:
        0.

    Example:
        >>> main(["--fast", "--out", "/tmp/t08"])  # doctest: +SKIP
        0
    """
    args = _common.parse_args(argv, "Tutorial 8: check a hand-written torch twin training step by training step",
                              steps=6, fast_steps=2, out="tutorial_output/t08")
    start, mx_folder = time.perf_counter(), os.path.join(args.out, "mxnet")
    mxnet_phase(args.steps, mx_folder)
    runs = [(label, "tutorials.t08_check:TorchTwin", kwargs) for label, kwargs in TWINS]
    runs.append(("generated from the MXNet graph", "generate", "{}"))
    summary = []
    for number, (label, spec, kwargs) in enumerate(runs, start=1):
        command = check_args(mx_folder, spec, kwargs)
        code, table, check = run_check(command)
        _common.write_text(os.path.join(args.out, f"check-{number}.txt"), table)
        print(f"\n{number}. {label}\n$ python -m migrate {shlex.join(command)}\n{shown(table)}\n(exit {code})")
        first = check["first_divergence"]
        summary.append({"twin": label, "exit_code": code, "compared": check["compared"],
                        "diverged": check["diverged"], "first_divergence": first and {
                            k: first[k] for k in ("kind", "name", "torch_name", "step", "max_abs_diff", "control",
                                                  "cause")},
                        "diverged_kinds": sorted({r["kind"] for r in check["rows"] if not r["ok"]})})
    _common.write_json(os.path.join(args.out, "summary.json"), {"steps": args.steps, "check_steps": CHECK_STEPS,
                                                                "runs": summary})
    print(f"\n({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
