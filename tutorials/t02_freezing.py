"""Tutorial 2: freezing under Adam, an element mask that changes every step, and gradual unfreezing.

The story. You want part of a network to stand still while the rest trains. The obvious ways do not work in MXNet:

- a zero gradient (TensorFlow's ``stop_gradient`` trick, or zeroing ``param.grad()``) under Adam: the first and
  second moments still hold earlier gradients, so the "frozen" weight keeps moving;
- ``lr_mult = 0`` under SGD with momentum: the momentum buffer keeps moving the weight.

``trainer.freeze(block)`` sets ``grad_req='null'`` and keeps the weight, every optimizer state array and the update
count bit-identical. Part 1 measures all three on the same network and batches.

Part 2 freezes a DIFFERENT random subset of one weight's elements at every step (the question users ask about
Adam): zeroing the masked gradient lets masked elements move; ``trainer.freeze(name, mask=m)`` holds exactly the
elements where ``m == 1`` at that step, and trains the others.

Part 3 is ULMFiT's gradual unfreezing: ``GradualUnfreezing(trainer, net)`` trains the head first, then unfreezes
one layer group per epoch from the head down. The table shows, per epoch, which groups moved: a frozen group moves
by exactly 0.

Run: ``python -m tutorials.t02_freezing [--steps 6] [--out tutorial_output/t02] [--fast]``. Writes ``summary.json``
and ``freezing.txt`` under ``--out``.
"""
import argparse
import os
import sys

from tutorials import _common

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402
from mxnet.gluon import nn  # noqa: E402

from gluon_lr import GradualUnfreezing, LrTrainer, layer_groups  # noqa: E402

CLASSES, FEATURES, BATCH = 4, 20, 16
ADAM = {"learning_rate": 0.01}
MASKED = "mlp_dense1_weight"


def build_net(seed: int = 0) -> gluon.HybridBlock:
    """A 4-layer MLP (Dense+BatchNorm, Dense, Dense, head), seeded; its first layer is ``mlp_dense0``.

    Example:
        >>> [len(g) for g in layer_groups(build_net())]   # the BatchNorm shares the first layer's depth
        [2, 1, 1, 1]
    """
    mx.random.seed(seed)
    net = nn.HybridSequential(prefix="mlp_")
    with net.name_scope():
        net.add(nn.Dense(32, activation="relu", in_units=FEATURES), nn.BatchNorm(in_channels=32),
                nn.Dense(32, activation="relu", in_units=32), nn.Dense(16, activation="relu", in_units=32),
                nn.Dense(CLASSES, in_units=16))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


def _batches(steps: int, seed: int = 0) -> list:
    """``steps`` synthetic (data, label) batches of FEATURES-long vectors."""
    return list(_common.synthetic_batches(steps, CLASSES, (FEATURES,), BATCH, seed))


def _moved(before: dict, after: dict, names) -> float:
    """The largest absolute change of any element of the named weights."""
    return max(float(np.abs(after[name] - before[name]).max()) for name in names)


def freeze_pitfall(steps: int) -> list:
    """Train 2 steps, then hold ``mlp_dense0_*`` still for ``steps`` steps three ways; how far did they move?

    Returns:
        Rows ``{"how", "optimizer", "moved"}``: the largest change of the first layer's weight or bias.
    """
    ctx, loss_fn, data = mx.cpu(), gluon.loss.SoftmaxCrossEntropyLoss(), _batches(steps + 2)
    held = ["mlp_dense0_weight", "mlp_dense0_bias"]
    rows = []
    for how, optimizer, kwargs in (("zero gradient (stop_gradient)", "adam", ADAM),
                                   ("lr_mult = 0", "sgd", {"learning_rate": 0.05, "momentum": 0.9}),
                                   ("LrTrainer.freeze", "adam", ADAM)):
        net = build_net()
        params = net.collect_params()
        trainer_class = LrTrainer if how.startswith("LrTrainer") else gluon.Trainer
        trainer = trainer_class(params, optimizer, kwargs)
        for x, y in data[:2]:
            _common.train_step(net, trainer, loss_fn, x, y, ctx)
        before = _common.snapshot(params.values())
        if how == "lr_mult = 0":
            for name in held:
                params[name].lr_mult = 0.0
        elif how == "LrTrainer.freeze":
            trainer.freeze(net[0])
        for x, y in data[2:]:
            if how.startswith("zero"):
                _zero_grad_step(net, trainer, loss_fn, x, y, held)
            else:
                _common.train_step(net, trainer, loss_fn, x, y, ctx)
        rows.append({"how": how, "optimizer": optimizer, "moved": _moved(before, _common.snapshot(params.values()),
                                                                          held)})
    return rows


def _zero_grad_step(net, trainer, loss_fn, x, y, names) -> None:
    """One step with the gradients of ``names`` set to zero between backward and step."""
    data, label = mx.nd.array(x), mx.nd.array(y)
    with autograd.record():
        loss = loss_fn(net(data), label)
    loss.backward()
    params = net.collect_params()
    for name in names:
        params[name].grad()[:] = 0
    trainer.step(data.shape[0])


def mask_pitfall(steps: int, seed: int = 1) -> list:
    """A new random half of MASKED's elements held at every step: zeroed gradient (stock Adam) vs a mask.

    Returns:
        Rows ``{"how", "masked_moved", "free_moved", "masked_total"}``: over all steps, how many elements held at
        that step changed anyway, how many free elements changed, and how many were held in all.
    """
    ctx, loss_fn, data = mx.cpu(), gluon.loss.SoftmaxCrossEntropyLoss(), _batches(steps + 2)
    rows = []
    for how in ("zero gradient of masked elements", "LrTrainer.freeze(name, mask=m)"):
        rng = np.random.RandomState(seed)
        net = build_net()
        param = net.collect_params()[MASKED]
        lr_trainer = how.startswith("LrTrainer")
        trainer = (LrTrainer if lr_trainer else gluon.Trainer)(net.collect_params(), "adam", ADAM)
        for x, y in data[:2]:
            _common.train_step(net, trainer, loss_fn, x, y, ctx)
        counts = {"masked_moved": 0, "free_moved": 0, "masked_total": 0}
        for x, y in data[2:]:
            mask = (rng.uniform(size=param.shape) < 0.5).astype("float32")
            before = param.data().asnumpy()
            if lr_trainer:
                trainer.freeze(MASKED, mask=mask)
                _common.train_step(net, trainer, loss_fn, x, y, ctx)
            else:
                _masked_grad_step(net, trainer, loss_fn, x, y, param, mask)
            changed = param.data().asnumpy() != before
            counts["masked_moved"] += int((changed & (mask == 1)).sum())
            counts["free_moved"] += int((changed & (mask == 0)).sum())
            counts["masked_total"] += int(mask.sum())
        rows.append({"how": how, **counts})
    return rows


def _masked_grad_step(net, trainer, loss_fn, x, y, param, mask) -> None:
    """One step with the gradient of ``param`` multiplied by ``1 - mask`` (the stop_gradient way)."""
    data, label = mx.nd.array(x), mx.nd.array(y)
    with autograd.record():
        loss = loss_fn(net(data), label)
    loss.backward()
    param.grad()[:] *= mx.nd.array(1 - mask)
    trainer.step(data.shape[0])


def gradual_unfreezing(steps_per_epoch: int) -> list:
    """ULMFiT on the MLP: one epoch per layer group; per epoch the largest change of each group's parameters.

    Returns:
        Rows ``{"epoch", "trainable", "unfrozen", "moved", "loss"}``; ``moved`` lists one number per group, input
        side first, ``unfrozen`` the names ``begin_epoch`` unfroze.
    """
    ctx, loss_fn = mx.cpu(), gluon.loss.SoftmaxCrossEntropyLoss()
    net = build_net()
    params = net.collect_params()
    trainer = LrTrainer(params, "adam", ADAM)
    schedule = GradualUnfreezing(trainer, net)
    groups = schedule.groups()
    data = _batches(steps_per_epoch * schedule.n_groups, seed=2)
    rows = []
    for epoch in range(schedule.n_groups):
        unfrozen = schedule.begin_epoch(epoch)
        before = _common.snapshot(params.values())
        losses = [_common.train_step(net, trainer, loss_fn, x, y, ctx)
                  for x, y in data[epoch * steps_per_epoch:(epoch + 1) * steps_per_epoch]]
        after = _common.snapshot(params.values())
        rows.append({"epoch": epoch, "trainable": schedule.trainable_groups, "unfrozen": unfrozen,
                     "moved": [_moved(before, after, names) for names in groups], "loss": float(np.mean(losses))})
    return rows


def tables(freeze_rows: list, mask_rows: list, unfreeze_rows: list, groups: list) -> str:
    """The three parts as text tables."""
    part1 = _common.table(["holding mlp_dense0 still by", "optimizer", "largest |change|", "held?"],
                          [[r["how"], r["optimizer"], f"{r['moved']:.3g}", "yes" if r["moved"] == 0 else "NO"]
                           for r in freeze_rows])
    part2 = _common.table([f"a new random half of {MASKED} held each step", "held elements that moved",
                           "free elements that moved"],
                          [[r["how"], f"{r['masked_moved']} of {r['masked_total']}", r["free_moved"]]
                           for r in mask_rows])
    header = ["epoch", "trainable groups"] + [f"|change| {g}" for g in groups] + ["mean loss"]
    part3 = _common.table(header, [[r["epoch"], r["trainable"]] + [f"{m:.3g}" for m in r["moved"]] +
                                   [f"{r['loss']:.4f}"] for r in unfreeze_rows])
    return (f"1. Freezing a layer under Adam (and SGD with momentum)\n{part1}\n\n"
            f"2. An element mask that changes every step (Adam)\n{part2}\n\n"
            f"3. Gradual unfreezing, one layer group per epoch from the head down\n{part3}")


def _parse(argv) -> argparse.Namespace:
    """The command line: --steps, --out, --fast (3 steps)."""
    return _common.parse_args(argv, "Tutorial 2: freezing under Adam, element masks, gradual unfreezing.",
                              steps=6, fast_steps=3, out=os.path.join("tutorial_output", "t02"),
                              steps_help="steps per part / per epoch")


def main(argv=None) -> int:
    """Run tutorial 2 and write ``freezing.txt`` and ``summary.json`` under ``--out``.

    Args:
        argv: Command-line arguments (None reads sys.argv).

    Returns:
        0.

    Example:
        >>> main(["--fast", "--out", "/tmp/t02"])
        0
    """
    args = _parse(argv)
    freeze_rows, mask_rows = freeze_pitfall(args.steps), mask_pitfall(args.steps)
    unfreeze_rows = gradual_unfreezing(args.steps)
    groups = ["+".join(block.name for block in group) for group in layer_groups(build_net())]
    text = tables(freeze_rows, mask_rows, unfreeze_rows, groups)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    _common.write_text(os.path.join(args.out, "freezing.txt"), text)
    _common.write_json(os.path.join(args.out, "summary.json"),
                       {"steps": args.steps, "freeze": freeze_rows, "mask": mask_rows, "groups": groups,
                        "unfreezing": unfreeze_rows})
    print(f"\noutputs in {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
