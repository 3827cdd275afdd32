"""Tutorial 1: fine-tune a network with a slow backbone and a fast head, and see why each parameter got its rate.

The story. You take a model-zoo resnet18_v1 (here with random weights standing in for ``pretrained=True``, so
nothing is downloaded), give it a new 10-class head, and fine-tune it on your data (here synthetic: 10 noisy class
templates, so the loss falls within a few dozen steps). The usual Gluon recipe sets ``lr_mult`` on the head's
collected parameters; you also want the stem and first stage slower still, and no weight decay on BatchNorm and
biases. Three sources of multipliers, one question: which rate does each parameter get?

1. The parameters come as merged ParameterDicts (``[net.features.collect_params(), net.output.collect_params()]``),
   the way fine-tuning code often passes them; the head's ``lr_mult = 10`` is set on its collected parameters.
2. ``Rule`` objects add the rest: a regex for the early layers, the ``'norm'`` and ``'bias'`` kinds for weight decay.
3. ``trainer.explain()`` prints one row per parameter: the values, the rule or attribute each came from, and the rules
   it overrode. The tutorial then trains on ``mx.gpu(0)`` when MXNet sees a GPU (the CPU otherwise) and prints each
   group's effective learning rate, as configured AND as measured from the weights on the first step.

The MXNet pitfall, side by side: on a stock optimizer (the Module API's ``mod._optimizer``), two ``set_lr_mult``
calls keep only the second dictionary, so the first parameter silently trains at the full rate. LrTrainer keeps both.

Run: ``python -m tutorials.t01_finetune [--steps 30] [--out tutorial_output/t01] [--fast]``. Writes under ``--out``:
``explain.txt``, ``groups.txt``, ``loss.csv``, ``summary.json``, ``settings.json`` (what ``migrate`` reads),
``trainer.states`` and ``model.params``.
"""
import argparse
import os
import sys
import tempfile
import time

from tutorials import _common  # noqa: F401  (sets OMP_NUM_THREADS before mxnet loads)

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402
from mxnet.gluon.model_zoo import vision  # noqa: E402

from gluon_lr import LrTrainer, Rule  # noqa: E402

CLASSES, SIZE, BATCH = 10, 32, 16
LR, MOMENTUM, WD = 0.002, 0.9, 1e-4
HEAD_LR_MULT = 10.0
RULES = [
    Rule("re:resnetv10_(conv0|batchnorm0|stage1)_.*", lr_mult=0.1),  # stem and first stage: slower still
    Rule("norm", wd_mult=0.0),                                        # no weight decay on BatchNorm
    Rule("bias", wd_mult=0.0),                                        # nor on biases
]
PITFALL_LR = 0.1
#: Rows of the explanation printed on the terminal (explain.txt holds all of them).
SHOWN = ["resnetv10_conv0_weight", "resnetv10_batchnorm0_gamma", "resnetv10_batchnorm0_running_mean",
         "resnetv10_stage2_conv0_weight", "resnetv10_stage4_batchnorm4_beta", "resnetv10_dense0_weight",
         "resnetv10_dense0_bias"]
_SOURCE_LABELS = {"param": "param (Parameter.lr_mult)"}


def build_net(ctx=None, seed: int = 0) -> gluon.HybridBlock:
    """resnet18_v1 with random "pretrained" features and a new CLASSES-way head whose lr_mult is HEAD_LR_MULT.

    Args:
        ctx: The context to initialise on (default CPU).
        seed: MXNet's random seed for the initial weights.

    Returns:
        The network; its head is ``net.output`` (``resnetv10_dense0_*``), its backbone ``net.features``.

    Example:
        >>> net = build_net()
        >>> net.output.weight.lr_mult
        10.0
    """
    ctx = ctx or mx.cpu()
    mx.random.seed(seed)
    net = vision.resnet18_v1(classes=CLASSES, prefix="resnetv10_")
    net.features.initialize(mx.init.Xavier(), ctx=ctx)          # stands in for the pretrained weights
    net.output.initialize(mx.init.Xavier(), ctx=ctx)            # the new head
    net.output.collect_params().setattr("lr_mult", HEAD_LR_MULT)  # Gluon's fine-tuning recipe: a fast head
    net.hybridize()
    return net


def build_trainer(net: gluon.HybridBlock) -> LrTrainer:
    """An LrTrainer over the merged ParameterDicts of backbone and head, with RULES (SGD, momentum, weight decay).

    Example:
        >>> trainer = build_trainer(build_net())
        >>> trainer.lr_mult["resnetv10_dense0_weight"], trainer.lr_mult["resnetv10_conv0_weight"]
        (10.0, 0.1)
    """
    params = [net.features.collect_params(), net.output.collect_params()]
    return LrTrainer(params, "sgd", {"learning_rate": LR, "momentum": MOMENTUM, "wd": WD}, rules=RULES)


def pitfall_two_calls() -> dict:
    """Two ``set_lr_mult`` calls, one per parameter, on a stock optimizer and on LrTrainer; the measured rates.

    Each parameter starts at 0 and gets gradient 1, so one plain SGD step moves it by exactly ``-lr * lr_mult``.

    Returns:
        ``{"stock": {"a": lr, "b": lr}, "LrTrainer": {"a": lr, "b": lr}}`` (intended: ``PITFALL_LR * 0.1`` each).
    """
    stock = mx.optimizer.SGD(learning_rate=PITFALL_LR, param_idx2name={0: "a", 1: "b"})  # as Module builds it
    stock.set_lr_mult({"a": 0.1})
    stock.set_lr_mult({"b": 0.1})  # replaces the first dictionary: 'a' is back at the full rate
    updater = mx.optimizer.get_updater(stock)
    found = {"stock": {}, "LrTrainer": {}}
    for index, name in ((0, "a"), (1, "b")):
        weight = mx.nd.zeros((1,))
        updater(index, mx.nd.ones((1,)), weight)
        found["stock"][name] = -float(weight.asscalar())
    params = gluon.ParameterDict()
    for name in ("a", "b"):
        params.get(name, shape=(1,), init=mx.init.Zero())
    params.initialize()
    trainer = LrTrainer(params, "sgd", {"learning_rate": PITFALL_LR})
    trainer.set_lr_mult({"a": 0.1})
    trainer.set_lr_mult({"b": 0.1})  # both calls hold
    with autograd.record():
        loss = params.get("a").data().sum() + params.get("b").data().sum()
    loss.backward()
    trainer.step(1)
    found["LrTrainer"] = {name: -float(params.get(name).data().asscalar()) for name in ("a", "b")}
    return found


def lr_groups(trainer: LrTrainer, net: gluon.Block) -> list:
    """The trainer's parameters grouped by (lr_mult, where it came from), in index order of first appearance.

    Returns:
        A list of dicts ``{"source", "lr_mult", "names"}``; parameters without gradient (BatchNorm running
        statistics) are left out.
    """
    params = net.collect_params()
    groups = {}
    for name, row in trainer.explain().to_dict().items():
        if params[name].grad_req == "null":
            continue
        key = (row["lr_mult"], row["lr_source"])
        groups.setdefault(key, {"source": row["lr_source"], "lr_mult": row["lr_mult"], "names": []})
        groups[key]["names"].append(name)
    return list(groups.values())


def measured_first_step(net, trainer, loss_fn, data, label, ctx) -> tuple:
    """The first training step, measuring each parameter's applied learning rate from its weights.

    Returns:
        (mean loss, name -> measured learning rate) for the parameters that have a gradient.
    """
    params = {name: p for name, p in net.collect_params().items() if p.grad_req != "null"}
    x, y = mx.nd.array(data, ctx=ctx), mx.nd.array(label, ctx=ctx)
    with autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    before = _common.snapshot(params.values())
    grads = {name: p.grad().asnumpy() for name, p in params.items()}
    trainer.step(x.shape[0])
    after = _common.snapshot(params.values())
    wd = trainer.optimizer.wd
    measured = {name: _common.first_step_lr(before[name], after[name], grads[name], 1.0 / x.shape[0],
                                            wd * trainer.wd_mult[name]) for name in params}
    return float(loss.mean().asscalar()), measured


def train(steps: int, ctx, seed: int = 0, log=sys.stderr) -> tuple:
    """Build the network and trainer and fine-tune for ``steps`` steps on synthetic batches.

    Args:
        steps: Number of steps (>= 1), batch BATCH each.
        ctx: The MXNet context.
        seed: Seed of the weights and of the data.
        log: Where progress lines go.

    Returns:
        (net, trainer, losses, measured) with ``measured`` the learning rates measured on the first step.

    Example:
        >>> net, trainer, losses, measured = train(3, mx.cpu())
    """
    net, loss_fn = build_net(ctx, seed), gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = build_trainer(net)
    batches = _common.synthetic_batches(steps, CLASSES, (3, SIZE, SIZE), BATCH, seed)
    loss, measured = measured_first_step(net, trainer, loss_fn, *next(batches), ctx)
    losses = [loss]
    for step, (data, label) in enumerate(batches, start=2):
        losses.append(_common.train_step(net, trainer, loss_fn, data, label, ctx))
        if step % 10 == 0 or step == steps:
            print(f"step {step:3d}  loss {losses[-1]:.4f}", file=log)
    return net, trainer, losses, measured


def group_table(groups: list, trainer: LrTrainer, measured: dict) -> tuple:
    """The effective learning rate of each group, configured (rate x lr_mult) and measured on step 1.

    Returns:
        (text table, list of row dicts).
    """
    rows = []
    for group in groups:
        values = [measured[name] for name in group["names"]]
        rows.append({"source": group["source"], "params": len(group["names"]), "lr_mult": group["lr_mult"],
                     "effective_lr": LR * group["lr_mult"], "now_lr": trainer.learning_rate * group["lr_mult"],
                     "measured_min": min(values), "measured_max": max(values)})
    text = _common.table(
        ["lr from", "params", "lr_mult", "effective lr", "measured on step 1 (min..max)"],
        [[_SOURCE_LABELS.get(r["source"], r["source"]), r["params"], f"{r['lr_mult']:g}", f"{r['effective_lr']:.6g}",
          f"{r['measured_min']:.6g} .. {r['measured_max']:.6g}"] for r in rows])
    return text, rows


def pitfall_table(found: dict) -> str:
    """The two-calls pitfall as a text table of measured learning rates."""
    want = PITFALL_LR * 0.1
    labels = {"stock": "stock mx.optimizer (as Module's)", "LrTrainer": "LrTrainer"}
    rows = [[labels[who], f"{rates['a']:.6g}", f"{rates['b']:.6g}",
             "yes" if all(abs(r - want) < 1e-9 for r in rates.values()) else "NO: the first call was lost"]
            for who, rates in found.items()]
    return _common.table(["set_lr_mult({'a': .1}); set_lr_mult({'b': .1})", "lr of a", "lr of b",
                          f"both {want:g}?"], rows)


def save_outputs(out: str, net, trainer, texts: dict, summary: dict, losses: list) -> None:
    """Write the text tables, loss.csv, summary.json, settings.json, trainer.states and model.params under ``out``."""
    os.makedirs(out, exist_ok=True)
    for name, text in texts.items():
        _common.write_text(os.path.join(out, name), text)
    _common.write_loss_csv(os.path.join(out, "loss.csv"), {"loss": losses})
    _common.write_json(os.path.join(out, "summary.json"), summary)
    trainer.export_settings(os.path.join(out, "settings.json"))
    trainer.save_states(os.path.join(out, "trainer.states"))
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        net.save_parameters(os.path.join(tmp, "model.params"))
        os.replace(os.path.join(tmp, "model.params"), os.path.join(out, "model.params"))


def _parse(argv) -> argparse.Namespace:
    """The command line: --steps, --out, --fast (3 steps)."""
    return _common.parse_args(argv, "Tutorial 1: fine-tune resnet18_v1 with a slow backbone and a fast head "
                              "(LrTrainer, rules, explain).", steps=30, fast_steps=3,
                              out=os.path.join("tutorial_output", "t01"))


def main(argv=None) -> int:
    """Run tutorial 1: the pitfall, the explanation, training, each group's effective rate; write the outputs.

    Args:
        argv: Command-line arguments (None reads sys.argv).

    Returns:
        0.

    Example:
        >>> main(["--fast", "--out", "/tmp/t01"])
        0
    """
    args = _parse(argv)
    start, ctx = time.perf_counter(), _common.pick_context()
    found = pitfall_two_calls()
    print("The pitfall: two set_lr_mult calls, measured learning rates\n" + pitfall_table(found) + "\n")
    net, trainer, losses, measured = train(args.steps, ctx)
    explanation = str(trainer.explain())
    print(f"Why each parameter has its multipliers (trainer.explain(): {len(trainer.lr_mult)} rows in "
          f"{os.path.join(args.out, 'explain.txt')}, {len(SHOWN)} shown)\n{_common.abridged(explanation, SHOWN)}\n")
    groups_text, rows = group_table(lr_groups(trainer, net), trainer, measured)
    print(f"Effective learning rate of each group (base rate {LR:g}, trained on {ctx})\n{groups_text}\n")
    summary = {"context": str(ctx), "steps": args.steps, "pitfall": found, "groups": rows,
               "loss_first": losses[0], "loss_last": losses[-1]}
    save_outputs(args.out, net, trainer, {"explain.txt": explanation, "groups.txt": groups_text}, summary, losses)
    print(f"loss: step 1 {losses[0]:.4f}, mean of the last 5 steps {np.mean(losses[-5:]):.4f} "
          f"({time.perf_counter() - start:.1f} s on {ctx}); outputs in {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
