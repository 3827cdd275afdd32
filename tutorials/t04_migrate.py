"""Tutorial 4: carry a fine-tuning run from MXNet to PyTorch, and keep training there as if nothing happened.

The story. You fine-tuned resnet18_v1 in MXNet with tutorial 1's per-layer rates (a slow stem, a fast head, no
weight decay on BatchNorm and biases) and momentum SGD, and the rest of the training should run in PyTorch. Four
things must come across, or the torch run is a different experiment: the weights (under torch's names), the
per-parameter learning rates and weight decay (as torch param groups), the optimizer state (the momentum buffers)
and the update rule itself (MXNet's SGD puts the learning rate inside the momentum buffer; torch's outside).

1. MXNet trains N steps and writes what the ``migrate`` command reads: the network (``HybridBlock.export``: a symbol
   and a params file), the settings file (``LrTrainer.export_settings``) and the optimizer states
   (``LrTrainer.save_states``).
2. ``python -m migrate all ...`` (a subprocess, as you would run it in a shell) maps every MXNet name to its
   torchvision ``resnet18`` key by matching the two ONNX graphs, verifies the mapping node by node, and writes
   ``weights.safetensors``, ``param_groups.json``, ``optimizer.pt`` and a report into one folder.
3. ``migrate.load_migration(folder, model)`` loads the weights into a fresh torchvision model and rebuilds the optimizer
   with MXNet's state; torch trains the next N steps on the same batches.
4. For reference, the MXNet run goes on for the same N steps. The plot shows the loss of N MXNet steps followed by
   N torch steps against the all-MXNet run of 2N steps; the tutorial prints how far apart the losses and the final
   weights are.

What to expect. The first torch step's loss equals MXNet's to float32 precision (~1e-6): weights and optimizer
state came across exactly. After that the two frameworks' float32 kernels round differently and the runs drift
apart slowly (here about 1e-3 in the loss and 7e-4 in the weights after 10 steps; a step where a BatchNorm sees a
channel with almost no variance amplifies it). The BatchNorm running statistics drift more (about 3e-2): torch
updates ``running_var`` with the unbiased batch variance (n / (n - 1)), MXNet with the biased one; training-mode
losses do not use them, evaluation does.

Run: ``python -m tutorials.t04_migrate [--steps 10] [--out tutorial_output/t04] [--fast]``. Writes under ``--out``:
``mxnet/`` (what migrate reads), ``migrated/`` (what migrate wrote, ``report.txt`` among it), ``loss.png``,
``loss.csv`` and ``summary.json``.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

from tutorials import _common, t01_finetune

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import gluon  # noqa: E402

TORCH_MODEL, TORCH_KWARGS = "torchvision.models:resnet18", {"num_classes": t01_finetune.CLASSES}
PERTURB = 1e-7  # the control run's relative weight perturbation: float32 rounding's size
INPUT_SHAPE = f"2,3,{t01_finetune.SIZE},{t01_finetune.SIZE}"


def mxnet_phase(steps: int, folder: str = None, perturb: float = 0.0, log=sys.stderr) -> tuple:
    """Tutorial 1's fine-tuning for ``2 * steps`` steps; after ``steps`` it writes migrate's inputs into ``folder``.

    Args:
        steps: N.
        folder: Where to write migrate's inputs after N steps (None: nowhere).
        perturb: If > 0, multiply every trained weight by ``1 + perturb * noise`` (standard normal noise) after N
            steps: the control run that shows how far float32 rounding alone lets two runs drift apart.
        log: Where progress lines go.

    Returns:
        (losses of all 2 * steps MXNet steps, the batches, the MXNet network after 2 * steps steps).
    """
    ctx = mx.cpu()
    shape = (3, t01_finetune.SIZE, t01_finetune.SIZE)
    batches = list(_common.synthetic_batches(2 * steps, t01_finetune.CLASSES, shape, t01_finetune.BATCH))
    net, loss_fn = t01_finetune.build_net(ctx), gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = t01_finetune.build_trainer(net)
    losses = []
    for step, (data, label) in enumerate(batches, start=1):
        losses.append(_common.train_step(net, trainer, loss_fn, data, label, ctx))
        if step == steps and folder:
            os.makedirs(folder, exist_ok=True)
            net.export(os.path.join(folder, "net"))  # net-symbol.json, net-0000.params
            trainer.export_settings(os.path.join(folder, "settings.json"))
            trainer.save_states(os.path.join(folder, "trainer.states"))
            print(f"MXNet: {steps} steps done, migrate's inputs written to {folder}/", file=log)
        if step == steps and perturb:
            _perturb(net, perturb)
    return losses, batches, net


def _perturb(net: gluon.Block, scale: float, seed: int = 1) -> None:
    """Multiply every trained weight by ``1 + scale * noise`` (seeded standard normal noise)."""
    rng = np.random.RandomState(seed)
    for param in net.collect_params().values():
        if param.grad_req != "null":
            value = param.data().asnumpy()
            noise = rng.standard_normal(value.shape).astype("float32")
            param.set_data(mx.nd.array(value * (1 + scale * noise)))


def migrate_command(mx_folder: str, out: str) -> list:
    """The ``python -m migrate all`` command line for the files ``mxnet_phase`` wrote."""
    return [sys.executable, "-m", "migrate", "all",
            "--symbol", os.path.join(mx_folder, "net-symbol.json"),
            "--params", os.path.join(mx_folder, "net-0000.params"),
            "--settings", os.path.join(mx_folder, "settings.json"),
            "--states", os.path.join(mx_folder, "trainer.states"),
            "--torch", TORCH_MODEL, "--kwargs", json.dumps(TORCH_KWARGS),
            "--input-shape", INPUT_SHAPE, "--out", out, "--force"]


def run_migrate(mx_folder: str, out: str) -> subprocess.CompletedProcess:
    """Run the migrate command in a subprocess from the repository root; its stdout is the report."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([p for p in [os.environ.get("PYTHONPATH")] if p] + [root]))
    return subprocess.run(migrate_command(mx_folder, out), capture_output=True, text=True, env=env, cwd=root,
                          check=False)


def torch_phase(folder: str, batches: list) -> tuple:
    """Load the migrated folder into a fresh torchvision resnet18 and train on ``batches``.

    MXNet sums the batch's gradients and divides by the batch size through ``rescale_grad``; the migrated
    optimizer keeps that factor, so the loss given to ``backward`` here is the SUM over the batch.

    Returns:
        (mean loss of each step, the torch model, the optimizer).
    """
    import torch
    import torchvision
    import migrate
    torch.manual_seed(0)
    model = torchvision.models.resnet18(**TORCH_KWARGS)
    optimizer, scheduler = migrate.load_migration(folder, model)
    loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")
    model.train()
    losses = []
    for data, label in batches:
        x, y = torch.from_numpy(data), torch.from_numpy(label).long()
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item() / len(label))
    return losses, model, optimizer


def weight_gaps(net: gluon.Block, model, mapping_file: str) -> dict:
    """|MXNet value - torch value| (largest element) of every mapped tensor, in torch's layout, by MXNet name.

    Example:
        >>> gaps = weight_gaps(net, model, "migrated/mapping.json")
    """
    import migrate
    mapping, state, params = migrate.NameMapping.load(mapping_file), model.state_dict(), net.collect_params()
    gaps = {}
    for name in mapping:
        if name in params and not mapping.entry(name).get("fold"):
            theirs = state[mapping[name]].detach().numpy()
            gaps[name] = float(np.abs(mapping.to_torch(name, params[name].data().asnumpy()) - theirs).max())
    return gaps


def _largest_difference(net: gluon.Block, other: gluon.Block, names: list) -> float:
    """The largest |difference| between two MXNet networks' values of the named parameters."""
    ours, theirs = net.collect_params(), other.collect_params()
    return max(float(np.abs(ours[n].data().asnumpy() - theirs[n].data().asnumpy()).max()) for n in names)


def _worst(gaps: dict, names) -> dict:
    """The largest gap among ``names``: {"gap", "name", "tensors"}."""
    names = [name for name in names if name in gaps]
    worst = max(names, key=gaps.get)
    return {"gap": gaps[worst], "name": worst, "tensors": len(names)}


def plot(path: str, mx_losses: list, migrated: list, control: list, steps: int) -> None:
    """The PNG: all-MXNet losses against MXNet-then-torch losses, the migration marked; written atomically."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401
    x = np.arange(1, len(mx_losses) + 1)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, mx_losses, color="tab:blue", lw=3, alpha=0.4, label=f"MXNet, all {len(mx_losses)} steps")
    ax.plot(x[:steps], migrated[:steps], color="tab:blue", marker="o", ms=3, lw=1, label=f"MXNet, steps 1-{steps}")
    ax.plot(x[steps - 1:], migrated[steps - 1:], color="tab:red", marker="o", ms=3, lw=1,
            label=f"PyTorch after migrate, steps {steps + 1}-{len(mx_losses)}")
    ax.plot(x[steps - 1:], control[steps - 1:], color="gray", ls=":", lw=1,
            label=f"MXNet, weights x (1 + {PERTURB:g} noise) after step {steps}")
    ax.axvline(steps + 0.5, color="gray", ls="--", lw=1)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set(xlabel="training step (batch of 16)", ylabel="loss (mean over the batch)",
           title="resnet18: fine-tuning moved from MXNet to PyTorch half way")
    ax.legend()
    fig.tight_layout()
    folder = os.path.dirname(os.path.abspath(path))
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        fig.savefig(os.path.join(tmp, "plot.png"), dpi=100)
        os.replace(os.path.join(tmp, "plot.png"), path)
    plt.close(fig)


def groups_table(optimizer) -> str:
    """The torch optimizer's param groups: learning rate, weight decay, number of tensors."""
    rows = [[i, f"{g['lr']:.6g}", f"{g['weight_decay']:.6g}", len(g["params"])]
            for i, g in enumerate(optimizer.param_groups)]
    return _common.table(["torch param group", "lr", "weight_decay", "tensors"], rows)


def _parse(argv) -> argparse.Namespace:
    """The command line: --steps, --out, --fast (N = 2)."""
    return _common.parse_args(argv, "Tutorial 4: migrate a fine-tuning run from MXNet to PyTorch and continue it "
                              "there.", steps=10, fast_steps=2, out=os.path.join("tutorial_output", "t04"),
                              steps_help="N: MXNet steps before the migration, torch steps after it")


def _run_migrate_printed(mx_folder: str, folder: str) -> int:
    """Run ``migrate all``, print the command and its report (long tables cut), return its exit code."""
    print("$ python -m migrate " + shlex.join(migrate_command(mx_folder, folder)[3:]))
    done = run_migrate(mx_folder, folder)
    print(f"{_common.abridged_blocks(done.stdout)}\n(the whole report: {os.path.join(folder, 'report.txt')})")
    if done.returncode != 0:
        print(done.stderr.rstrip(), file=sys.stderr)
    return done.returncode


def compare(steps: int, mxnet: tuple, torch_run: tuple, control: tuple, mapping_file: str) -> dict:
    """The summary: losses, how far torch and the control run drift from MXNet, and the torch param groups.

    Args:
        steps: N.
        mxnet: (losses of 2N steps, network) of the all-MXNet run.
        torch_run: (losses of the N torch steps, torch model, torch optimizer).
        control: (losses of 2N steps, network) of the perturbed MXNet run.
        mapping_file: The mapping ``migrate all`` wrote.
    """
    (mx_losses, net), (torch_losses, model, optimizer), (control_losses, control_net) = mxnet, torch_run, control
    gaps = weight_gaps(net, model, mapping_file)
    trained = [name for name, p in net.collect_params().items() if p.grad_req != "null"]
    by_step = [abs(a - b) for a, b in zip(mx_losses[steps:], torch_losses)]
    return {"steps": steps, "mxnet_losses": mx_losses, "torch_losses": torch_losses, "control_losses": control_losses,
            "first_step_gap": by_step[0], "loss_gap": max(by_step),
            "weights": _worst(gaps, trained), "running_stats": _worst(gaps, set(gaps) - set(trained)),
            "control": {"loss_gap": max(abs(a - b) for a, b in zip(mx_losses[steps:], control_losses[steps:])),
                        "weight_gap": _largest_difference(net, control_net, trained)},
            "torch_groups": [{"lr": g["lr"], "weight_decay": g["weight_decay"], "tensors": len(g["params"])}
                             for g in optimizer.param_groups]}


def comparison_text(summary: dict) -> str:
    """The comparison in words."""
    n, weights, stats, control = summary["steps"], summary["weights"], summary["running_stats"], summary["control"]
    return (f"Torch against MXNet's own next {n} steps: the first torch step's loss within "
            f"{summary['first_step_gap']:.2g}, all {n} within {summary['loss_gap']:.2g}; after them the trained "
            f"weights within {weights['gap']:.2g} ({weights['tensors']} tensors, largest at {weights['name']}), the "
            f"BatchNorm running statistics within {stats['gap']:.2g} ({stats['name']}).\n"
            f"For scale, MXNet against itself with every weight multiplied by 1 + {PERTURB:g} x noise after step {n}: "
            f"losses within {control['loss_gap']:.2g}, weights within {control['weight_gap']:.2g}.")


def main(argv=None) -> int:
    """Run tutorial 4: MXNet N steps -> ``migrate all`` -> torch N steps, against MXNet 2N steps; plot it.

    Args:
        argv: Command-line arguments (None reads sys.argv).

    Returns:
        0, or the migrate command's exit code when it failed (its report is printed).

    Example:
        >>> main(["--fast", "--out", "/tmp/t04"])
        0
    """
    args = _parse(argv)
    start, n = time.perf_counter(), args.steps
    mx_folder, folder = os.path.join(args.out, "mxnet"), os.path.join(args.out, "migrated")
    mx_losses, batches, net = mxnet_phase(n, mx_folder)
    code = _run_migrate_printed(mx_folder, folder)
    if code != 0:
        return code
    torch_losses, model, optimizer = torch_phase(folder, batches[n:])
    print(f"\nThe torch optimizer as migrate rebuilt it\n{groups_table(optimizer)}\n")
    control_losses, _, control_net = mxnet_phase(n, perturb=PERTURB)
    summary = compare(n, (mx_losses, net), (torch_losses, model, optimizer), (control_losses, control_net),
                      os.path.join(folder, "mapping.json"))
    plot(os.path.join(args.out, "loss.png"), mx_losses, mx_losses[:n] + torch_losses, control_losses, n)
    _common.write_loss_csv(os.path.join(args.out, "loss.csv"), {"mxnet": mx_losses, "mxnet_then_torch": mx_losses[
        :n] + torch_losses, "mxnet_perturbed": control_losses})
    _common.write_json(os.path.join(args.out, "summary.json"), summary)
    print(comparison_text(summary))
    print(f"plot: {os.path.join(args.out, 'loss.png')}; migrate report: {os.path.join(folder, 'report.txt')} "
          f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
