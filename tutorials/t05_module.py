"""Tutorial 5: a ``mx.mod.Module`` training script, its multipliers as MXNet really applies them, and the migration.

The story. Old MXNet code trains with the symbolic Module API. Its per-layer rates come from two places: symbol
attributes (``mx.sym.Variable("fc1_weight", lr_mult=0.1)``) and ``mod._optimizer.set_lr_mult(dict)``. The pitfall:
each ``set_lr_mult`` call REBUILDS the table from the symbol attributes plus its dict, so a second call (here, for
the head's bias) silently drops the first one (the head's weight at 2x). Module also gives every parameter whose
name does not end in ``_weight``/``_gamma`` a weight decay of 0.

1. The Module trains N steps with momentum SGD on synthetic data. The first step's learning rate of each layer is
   measured from the weights: the head's weight was asked for 2x and gets 1x.
2. ``gluon_lr.export_settings(mod, path)`` writes the settings file with what MXNet applies (the table shows it);
   ``mod.save_checkpoint`` and ``mod.save_optimizer_states`` write the rest.
3. ``migrate all`` (in process) reads the Module checkpoint: the ``SoftmaxOutput`` loss head and its
   ``softmax_label`` input are cut from the graph (the report says so), the rest is matched to a torch MLP.
4. ``migrate.load_migration`` rebuilds the torch optimizer; torch trains the next N steps on the same batches, and is
   compared with the Module's own next N steps.

What to expect. The measured first-step rates are 0.1 x 0.1 (body, symbol attribute) and 0.1 (head weight: the 2x
was lost); torch continues the Module's training to float32 rounding (below 1e-6 in the weights and losses).

Run: ``python -m tutorials.t05_module [--steps 10] [--out tutorial_output/t05] [--fast]``. Writes under ``--out``:
``mxnet/`` (what migrate reads), ``migrated/`` (what migrate wrote, ``report.txt`` among it), ``loss.csv`` and
``summary.json``.
"""
import contextlib
import io
import os
import sys
import time

from tutorials import _common

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

import gluon_lr  # noqa: E402

FEATURES, HIDDEN, CLASSES, BATCH, LR, WD = 20, 32, 4, 16, 0.1, 1e-3
ASKED = {"fc2_weight": 2.0, "fc2_bias": 0.5}  # what the script means: a fast head weight, a slow head bias


def build_symbol():
    """data -> fc1 (lr_mult 0.1 as a symbol attribute: a 'pretrained' body) -> relu -> fc2 -> SoftmaxOutput."""
    body = mx.sym.FullyConnected(mx.sym.Variable("data"), weight=mx.sym.Variable("fc1_weight", lr_mult=0.1),
                                 bias=mx.sym.Variable("fc1_bias", lr_mult=0.1), num_hidden=HIDDEN, name="fc1")
    head = mx.sym.FullyConnected(mx.sym.Activation(body, act_type="relu"), num_hidden=CLASSES, name="fc2")
    return mx.sym.SoftmaxOutput(head, name="softmax")


def build_module():
    """The Module as a seed-era script writes it: bind, init, init_optimizer, then two set_lr_mult calls."""
    mx.random.seed(0)
    mod = mx.mod.Module(build_symbol(), context=mx.cpu())
    mod.bind(data_shapes=[("data", (BATCH, FEATURES))], label_shapes=[("softmax_label", (BATCH,))])
    mod.init_params(mx.init.Xavier())
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": LR, "momentum": 0.9, "wd": WD})
    mod._optimizer.set_lr_mult({"fc2_weight": ASKED["fc2_weight"]})
    mod._optimizer.set_lr_mult({"fc2_bias": ASKED["fc2_bias"]})  # rebuilds the table: fc2_weight's 2.0 is gone
    return mod


def module_step(mod, data, label) -> float:
    """One forward/backward/update; returns the mean cross-entropy of the batch (before the update)."""
    mod.forward_backward(mx.io.DataBatch([mx.nd.array(data)], [mx.nd.array(label)]))
    probs = mod.get_outputs()[0].asnumpy()
    mod.update()
    return float(-np.log(probs[np.arange(len(label)), label.astype(int)] + 1e-12).mean())


def measured_rates(mod, data, label) -> dict:
    """Take the FIRST step and measure each weight's learning rate from how it moved (momentum still zero)."""
    before = {n: v.asnumpy() for n, v in mod.get_params()[0].items()}
    mod.forward_backward(mx.io.DataBatch([mx.nd.array(data)], [mx.nd.array(label)]))
    grads = dict(zip(mod._exec_group.param_names, (g[0].asnumpy() for g in mod._exec_group.grad_arrays)))
    probs = mod.get_outputs()[0].asnumpy()
    mod.update()
    after = mod.get_params()[0]
    rescale = mod._optimizer.rescale_grad
    rates = {n: _common.first_step_lr(before[n], after[n].asnumpy(), grads[n], rescale,
                                      WD * mod._optimizer.wd_mult.get(n, 1.0)) for n in ("fc1_weight", "fc2_weight")}
    return rates, float(-np.log(probs[np.arange(len(label)), label.astype(int)] + 1e-12).mean())


def torch_mlp():
    """The torch twin of the Module's network (the factory ``migrate all --torch`` calls)."""
    import torch
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES))


def migrate_module(mx_folder: str, folder: str) -> tuple:
    """Run ``migrate all`` in process on the Module's files; (exit code, its printed report)."""
    from migrate.cli.commands import main as migrate_main
    argv = ["all", "--symbol", os.path.join(mx_folder, "mlp-symbol.json"),
            "--params", os.path.join(mx_folder, "mlp-0000.params"), "--settings", os.path.join(mx_folder,
            "settings.json"), "--states", os.path.join(mx_folder, "mlp.states"), "--torch",
            "tutorials.t05_module:torch_mlp", "--input-shape", f"{BATCH},{FEATURES}", "--out", folder, "--force"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = migrate_main(argv)
    return code, printed.getvalue()


def torch_phase(folder: str, batches: list) -> tuple:
    """Load the migration into a fresh torch MLP and train on ``batches``; (mean losses, model, mapping)."""
    import torch
    import migrate
    model = torch_mlp()
    optimizer, scheduler = migrate.load_migration(folder, model)
    losses = []
    for data, label in batches:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.tensor(data)), torch.tensor(label).long(), reduction="sum")
        loss.backward()  # the SUM: MXNet's SoftmaxOutput gradient; rescale_grad = 1/batch divides it
        optimizer.step()
        scheduler.step()
        losses.append(loss.item() / len(label))
    return losses, model, migrate.NameMapping.load(os.path.join(folder, "mapping.json"))


def main(argv=None) -> int:
    """Run tutorial 5: Module N steps (pitfall measured) -> settings + checkpoint -> migrate -> torch N steps.

    Args:
        argv: Command-line arguments (None reads sys.argv).

    Returns:
        0, or migrate's exit code when it failed.

    Example:
        >>> main(["--fast", "--out", "/tmp/t05"])
        0
    """
    args = _common.parse_args(argv, "Tutorial 5: Module API multipliers, settings file and migration.", steps=10,
                              fast_steps=3, out=os.path.join("tutorial_output", "t05"),
                              steps_help="N: Module steps before the migration, torch steps after it")
    start, n = time.perf_counter(), args.steps
    batches = list(_common.synthetic_batches(2 * n, CLASSES, (FEATURES,), BATCH, seed=5))
    mod, reference = build_module(), build_module()
    rates, first = measured_rates(mod, *batches[0])
    mx_losses = [first] + [module_step(mod, *b) for b in batches[1:n]]
    print("First-step learning rates measured from the weights (base lr 0.1)")
    print(_common.table(["parameter", "asked lr", "measured lr"],
                        [["fc1_weight", f"{LR * 0.1:g} (symbol attribute)", f"{rates['fc1_weight']:.6g}"],
                         ["fc2_weight", f"{LR * ASKED['fc2_weight']:g} (first set_lr_mult)",
                          f"{rates['fc2_weight']:.6g}"]]))
    mx_folder, folder = os.path.join(args.out, "mxnet"), os.path.join(args.out, "migrated")
    os.makedirs(mx_folder, exist_ok=True)
    mod.save_checkpoint(os.path.join(mx_folder, "mlp"), 0)
    mod.save_optimizer_states(os.path.join(mx_folder, "mlp.states"))
    settings = gluon_lr.export_settings(mod, os.path.join(mx_folder, "settings.json"))
    print("\nThe settings file: what MXNet applies")
    print(_common.table(["parameter", "lr_mult", "wd_mult"],
                        [[name, p["lr_mult"], p["wd_mult"]] for name, p in settings["params"].items()]))
    code, report = migrate_module(mx_folder, folder)
    print("\n" + "\n".join(line for line in report.splitlines() if "note:" in line or "mapped," in line))
    if code != 0:
        print(report, file=sys.stderr)
        return code
    torch_losses, model, mapping = torch_phase(folder, batches[n:])
    ref_losses = [module_step(reference, *b) for b in batches]
    state = model.state_dict()
    gaps = {name: float(np.abs(v.asnumpy() - state[mapping[name]].numpy()).max())
            for name, v in reference.get_params()[0].items()}
    summary = {"steps": n, "measured_lr": rates, "asked_lr": {"fc1_weight": LR * 0.1, "fc2_weight": LR * ASKED[
        "fc2_weight"]}, "settings_params": settings["params"], "note": [ln.strip() for ln in report.splitlines()
                                                                       if "note:" in ln],
               "weight_gap": max(gaps.values()), "loss_gap": max(abs(a - b) for a, b in zip(ref_losses[n:],
                                                                                            torch_losses)),
               "module_losses": ref_losses, "torch_losses": torch_losses}
    _common.write_json(os.path.join(args.out, "summary.json"), summary)
    _common.write_loss_csv(os.path.join(args.out, "loss.csv"), {"module": ref_losses,
                                                                "module_then_torch": mx_losses + torch_losses})
    print(f"\nTorch against the Module's own next {n} steps: losses within {summary['loss_gap']:.2g}, weights "
          f"within {summary['weight_gap']:.2g}.")
    print(f"summary: {os.path.join(args.out, 'summary.json')} ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
