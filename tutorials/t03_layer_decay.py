"""Tutorial 3: layer-wise learning-rate decay on a deep network, with the decay table printed and measured.

The story. Fine-tuning recipes for deep networks (BEiT, ELECTRA, ULMFiT's discriminative rates) give the head the
full rate and each layer below it ``decay`` times the rate of the layer above. Writing those multipliers by hand for
a resnet or a transformer means listing parameter names per model. ``gluon_lr.layer_decay(net, decay)`` reads the
layers from the network's block tree instead: every residual unit (or transformer block) is one layer, a BatchNorm
shares the depth of the layer before it, the head is the deepest. It returns one rule per depth; rules given after
it (here: no weight decay on BatchNorm and biases) refine it.

The tutorial prints the decay table (depth, layer, multiplier, effective rate) next to the rate MEASURED from the
weights on the first SGD step, then the depth column of ``trainer.explain()``, and trains a few steps.

Run: ``python -m tutorials.t03_layer_decay [--steps 10] [--decay 0.75] [--out tutorial_output/t03] [--fast]``.
Writes ``decay.txt``, ``explain.txt`` and ``summary.json`` under ``--out``.
"""
import argparse
import os
import sys

from tutorials import _common

import mxnet as mx  # noqa: E402
from mxnet import gluon  # noqa: E402
from mxnet.gluon.model_zoo import vision  # noqa: E402

from gluon_lr import LrTrainer, Rule, layer_decay  # noqa: E402
from tutorials.t01_finetune import measured_first_step  # noqa: E402

CLASSES, SIZE, BATCH = 10, 32, 16
LR, MOMENTUM, WD = 0.01, 0.9, 1e-4
SHOWN = ["resnetv10_conv0_weight", "resnetv10_batchnorm0_gamma", "resnetv10_stage1_conv0_weight",
         "resnetv10_stage2_conv0_weight", "resnetv10_stage4_conv3_weight", "resnetv10_dense0_weight",
         "resnetv10_dense0_bias"]


def build(decay: float, ctx, seed: int = 0) -> tuple:
    """resnet18_v1 (random init) and an LrTrainer with ``layer_decay(net, decay)`` plus two weight-decay rules.

    Returns:
        (net, trainer, decay_rules).

    Example:
        >>> net, trainer, rules = build(0.75, mx.cpu())
        >>> len(rules), rules[-1].lr_mult
        (10, 1.0)
    """
    mx.random.seed(seed)
    net = vision.resnet18_v1(classes=CLASSES, prefix="resnetv10_")
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize()
    rules = layer_decay(net, decay)
    trainer = LrTrainer(net, "sgd", {"learning_rate": LR, "momentum": MOMENTUM, "wd": WD},
                        rules=rules + [Rule("norm", wd_mult=0.0), Rule("bias", wd_mult=0.0)])
    return net, trainer, rules


def decay_rows(rules: list, measured: dict, net: gluon.Block) -> list:
    """One row per depth: depth, layer, number of parameters, lr_mult, effective rate, measured range."""
    params = net.collect_params()
    rows = []
    for rule in rules:
        names = [name for name in params.keys() if rule.selects(name, frozenset()) and name in measured]
        values = [measured[name] for name in names]
        rows.append({"depth": rule.depth, "layer": rule.layer, "params": len(names), "lr_mult": rule.lr_mult,
                     "effective_lr": LR * rule.lr_mult, "measured_min": min(values), "measured_max": max(values)})
    return rows


def decay_table(rows: list) -> str:
    """The decay table as text."""
    return _common.table(["depth", "layer", "params", "lr_mult", "effective lr", "measured on step 1 (min..max)"],
                         [[r["depth"], r["layer"], r["params"], f"{r['lr_mult']:.4g}", f"{r['effective_lr']:.4g}",
                           f"{r['measured_min']:.4g} .. {r['measured_max']:.4g}"] for r in rows])


def _decay(text: str) -> float:
    """``--decay``: a factor in (0, 1]."""
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"--decay must be in (0, 1], got {value}")
    return value


def _parse(argv) -> argparse.Namespace:
    """The command line: --steps, --decay, --out, --fast (2 steps)."""
    return _common.parse_args(
        argv, "Tutorial 3: layer-wise learning-rate decay on resnet18_v1.", steps=10, fast_steps=2,
        out=os.path.join("tutorial_output", "t03"),
        extra=lambda parser: parser.add_argument("--decay", type=_decay, default=0.75,
                                                 help="factor per layer below the head (default 0.75)"))


def main(argv=None) -> int:
    """Run tutorial 3: print the decay table (configured and measured) and the explanation; train a few steps.

    Args:
        argv: Command-line arguments (None reads sys.argv).

    Returns:
        0.

    Example:
        >>> main(["--fast", "--out", "/tmp/t03"])
        0
    """
    args = _parse(argv)
    ctx, loss_fn = _common.pick_context(), gluon.loss.SoftmaxCrossEntropyLoss()
    net, trainer, rules = build(args.decay, ctx)
    batches = _common.synthetic_batches(args.steps, CLASSES, (3, SIZE, SIZE), BATCH)
    loss, measured = measured_first_step(net, trainer, loss_fn, *next(batches), ctx)
    losses = [loss] + [_common.train_step(net, trainer, loss_fn, x, y, ctx) for x, y in batches]
    rows = decay_rows(rules, measured, net)
    text, explanation = decay_table(rows), str(trainer.explain())
    print(f"Layer-wise decay {args.decay:g} on resnet18_v1: {len(rules)} depths, base rate {LR:g}\n{text}\n")
    print(f"The depth column of trainer.explain() ({len(trainer.lr_mult)} rows in "
          f"{os.path.join(args.out, 'explain.txt')}, {len(SHOWN)} shown)\n{_common.abridged(explanation, SHOWN)}\n")
    os.makedirs(args.out, exist_ok=True)
    _common.write_text(os.path.join(args.out, "decay.txt"), text)
    _common.write_text(os.path.join(args.out, "explain.txt"), explanation)
    _common.write_json(os.path.join(args.out, "summary.json"),
                       {"decay": args.decay, "steps": args.steps, "rows": rows, "losses": losses})
    print(f"loss: step 1 {losses[0]:.4f}, step {args.steps} {losses[-1]:.4f}; outputs in {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
