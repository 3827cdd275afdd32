"""Helpers shared by the tutorials: the device, synthetic data, one training step, measured learning rates, output."""
import argparse
import json
import os

os.environ.setdefault("OMP_NUM_THREADS", "2")

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd  # noqa: E402

from mxformats import atomic  # noqa: E402


def pick_context() -> mx.Context:
    """``mx.gpu(0)`` when MXNet sees a GPU, the CPU otherwise."""
    return mx.gpu(0) if mx.context.num_gpus() > 0 else mx.cpu()


def synthetic_batches(steps: int, classes: int, shape: tuple, batch: int, seed: int = 0, noise: float = 1.0):
    """Yield ``steps`` (data, label) numpy batches: each class is a fixed random template plus noise.

    The same ``seed`` gives the same batches, so two runs (MXNet and torch, say) can see identical data.
    """
    rng = np.random.RandomState(seed)
    templates = rng.normal(size=(classes,) + tuple(shape)).astype("float32")
    for _ in range(steps):
        label = rng.randint(0, classes, size=batch)
        data = templates[label] + noise * rng.normal(size=(batch,) + tuple(shape)).astype("float32")
        yield data, label.astype("float32")


def train_step(net, trainer, loss_fn, data, label, ctx) -> float:
    """One forward/backward/step on a numpy batch; returns the mean loss."""
    data, label = mx.nd.array(data, ctx=ctx), mx.nd.array(label, ctx=ctx)
    with autograd.record():
        loss = loss_fn(net(data), label)
    loss.backward()
    trainer.step(data.shape[0])
    return float(loss.mean().asscalar())


def snapshot(params) -> dict:
    """name -> numpy copy of each initialised Parameter's data (first context)."""
    return {p.name: p.data().asnumpy().copy() for p in params}


def first_step_lr(before: np.ndarray, after: np.ndarray, grad: np.ndarray, rescale: float, wd: float) -> float:
    """The learning rate that SGD's FIRST step applied, measured from the weights (momentum state still zero).

    MXNet's first SGD step is ``w1 = w0 - lr * (rescale * g + wd * w0)``; the least-squares ``lr`` over all
    elements is returned (NaN when the direction is all zero).
    """
    direction = rescale * grad + wd * before
    denom = float((direction * direction).sum())
    return float(((before - after) * direction).sum() / denom) if denom > 0 else float("nan")


def write_text(path: str, text: str) -> None:
    """Write ``text`` (UTF-8, newline-terminated) atomically."""
    atomic.write_text(path, text.rstrip("\n") + "\n")


def write_json(path: str, document: dict) -> None:
    """Write ``document`` as indented JSON atomically."""
    write_text(path, json.dumps(document, indent=2, sort_keys=True))


def write_loss_csv(path: str, columns: dict) -> None:
    """Write ``step,<name>...`` rows: one column per name in ``columns`` (lists of equal length)."""
    names = list(columns)
    rows = zip(*(columns[name] for name in names))
    lines = ["step," + ",".join(names)] + [f"{i}," + ",".join(f"{v:.6f}" for v in row)
                                           for i, row in enumerate(rows, start=1)]
    write_text(path, "\n".join(lines))


def table(header: list, rows: list) -> str:
    """A fixed-width text table with a rule under the header."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def abridged(text: str, names: list) -> str:
    """The header (two lines) of a table and its rows whose first cell is one of ``names``, in table order."""
    lines = text.splitlines()
    wanted = set(names)
    return "\n".join(lines[:2] + [line for line in lines[2:] if line.split(" ", 1)[0] in wanted])


def abridged_blocks(text: str, max_lines: int = 12, keep: int = 4) -> str:
    """``text`` with every blank-line-separated block longer than ``max_lines`` cut to its first ``keep`` lines."""
    blocks = []
    for block in text.strip("\n").split("\n\n"):
        lines = block.splitlines()
        if len(lines) > max_lines:
            lines = lines[:keep] + [f"... ({len(lines) - keep} more lines)"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def parse_args(argv, description: str, steps: int, fast_steps, out: str, steps_help: str = "",
               extra=None) -> argparse.Namespace:
    """The tutorials' command line: ``--steps``, ``--out``, ``--fast`` (and options ``extra(parser)`` adds).

    Args:
        argv: Command-line arguments (None reads sys.argv).
        description: What the script does (``--help``).
        steps: Default of ``--steps``.
        fast_steps: Steps under ``--fast`` (the test suite's setting); None leaves ``--steps`` as given.
        out: Default output folder.
        steps_help: What a step means here (``--help``).
        extra: Optional callable adding more options to the parser.

    Returns:
        The parsed arguments; a ``--steps`` below 1 exits with code 2 and a message naming the value.

    Example:
        >>> parse_args(["--fast"], "Tutorial 9", steps=10, fast_steps=2, out="tutorial_output/t09").steps
        2
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=steps,
                        help=f"{steps_help or 'training steps, batch of 16 each'} (default {steps})")
    parser.add_argument("--out", default=out, help=f"folder for the outputs (default {out})")
    parser.add_argument("--fast", action="store_true", help="the fast settings the test suite runs"
                        + (f" ({fast_steps} steps)" if fast_steps else ""))
    if extra is not None:
        extra(parser)
    args = parser.parse_args(argv)
    if args.fast and fast_steps:
        args.steps = fast_steps
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    return args
