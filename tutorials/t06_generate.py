"""Tutorial 6: a network with no PyTorch twin goes to PyTorch anyway, and its training carries on there.

The story. Your MXNet model is your own: a small CNN with depthwise convolutions, a squeeze-and-excitation gate
(global pooling, a broadcast multiply), MXNet's 'full' pooling convention and a BatchNorm with MXNet's momentum.
Nobody wrote it in torch, so tutorial 4's ``migrate all --torch package:factory`` has nothing to point at.
``--torch generate`` writes the torch model itself: ``model.py``, readable source that imports only torch, as a
torch engineer writes a model: ``__init__`` builds the block tree from torch layers (``nn.Conv2d``, ``nn.Linear``,
``nn.ReLU``, a BatchNorm with MXNet's semantics that is a torch ``_BatchNorm``), ``forward`` calls them in the MXNet
graph's order (training-mode BatchNorm and Dropout included), and the ``state_dict`` keys follow the Gluon block
tree.

1. MXNet trains N steps (LrTrainer, momentum SGD, the head at lr_mult 2) and exports what ``migrate`` reads.
2. ``migrate all --torch generate`` writes ``model.py`` next to the weights, param groups and optimizer state.
3. torch imports ``model.py``, ``migrate.load_migration`` loads the weights and rebuilds MXNet's exact optimizer,
   and torch trains the next N steps on the same batches; MXNet trains them too, for reference.

What to expect. The eval-mode outputs of the generated module equal MXNet's to float32 rounding (~1e-6); the torch
losses follow the MXNet run's (the first to float32 precision), and the weights stay within ~1e-5 after N steps.

Run: ``python -m tutorials.t06_generate [--steps 6] [--out tutorial_output/t06] [--fast]``. Writes under ``--out``:
``mxnet/`` (what migrate reads), ``migrated/`` (``model.py`` and what migrate wrote), ``loss.csv`` and
``summary.json``.
"""
import importlib.util
import os
import sys
import time
import warnings

from tutorials import _common

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import gluon  # noqa: E402

from gluon_lr import LrTrainer, Rule  # noqa: E402

CLASSES, BATCH, SHAPE = 4, 8, (3, 16, 16)
INPUT_SHAPE = f"{BATCH},{','.join(str(d) for d in SHAPE)}"


class SEBlock(gluon.HybridBlock):
    """Depthwise-separable convolution with a squeeze-and-excitation gate."""

    def __init__(self, channels, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.depthwise = gluon.nn.Conv2D(channels, 3, padding=1, groups=channels, use_bias=False)
            self.pointwise = gluon.nn.Conv2D(channels, 1, use_bias=False)
            self.norm = gluon.nn.BatchNorm(momentum=0.8)
            self.squeeze = gluon.nn.Dense(channels // 4, activation="relu")
            self.excite = gluon.nn.Dense(channels)

    def hybrid_forward(self, F, x):
        y = F.relu(self.norm(self.pointwise(self.depthwise(x))))
        gate = F.sigmoid(self.excite(self.squeeze(F.Pooling(y, global_pool=True, kernel=(1, 1), pool_type="avg"))))
        return x + F.broadcast_mul(y, F.expand_dims(F.expand_dims(gate, axis=2), axis=3))


class TinySENet(gluon.HybridBlock):
    """Stem, two SE blocks with 'full'-convention pooling between them, a dense head."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.stem = gluon.nn.HybridSequential()
            self.stem.add(gluon.nn.Conv2D(16, 3, padding=1, use_bias=False), gluon.nn.BatchNorm(),
                          gluon.nn.Activation("relu"))
            self.blocks = gluon.nn.HybridSequential()
            self.blocks.add(SEBlock(16), SEBlock(16))
            self.head = gluon.nn.Dense(CLASSES)

    def hybrid_forward(self, F, x):
        x = self.blocks[0](self.stem(x))
        x = F.Pooling(x, kernel=(3, 3), stride=(2, 2), pool_type="max", pooling_convention="full")
        return self.head(F.Pooling(self.blocks[1](x), global_pool=True, kernel=(1, 1), pool_type="avg"))


def mxnet_phase(steps: int, folder: str, log=sys.stderr) -> tuple:
    """Train ``2 * steps`` steps; after ``steps`` write migrate's inputs (symbol, params, settings, states).

    Returns:
        (losses of all 2 * steps steps, the batches, the network after 2 * steps steps).
    """
    mx.random.seed(0)
    net = TinySENet(prefix="senet_")
    net.initialize(mx.init.Xavier())
    net.hybridize()
    batches = list(_common.synthetic_batches(2 * steps, CLASSES, SHAPE, BATCH))
    trainer = LrTrainer(net, "sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-4},
                        rules=[Rule("senet_dense0_*", lr_mult=2.0)], kvstore=None)
    loss_fn, losses = gluon.loss.SoftmaxCrossEntropyLoss(), []
    for step, (data, label) in enumerate(batches, start=1):
        losses.append(_common.train_step(net, trainer, loss_fn, data, label, mx.cpu()))
        if step == steps:
            os.makedirs(folder, exist_ok=True)
            net.export(os.path.join(folder, "net"))
            trainer.export_settings(os.path.join(folder, "settings.json"))
            trainer.save_states(os.path.join(folder, "trainer.states"))
            print(f"MXNet: {steps} steps done, migrate's inputs written to {folder}/", file=log)
    return losses, batches, net


def migrate_args(mx_folder: str, out: str) -> list:
    """The ``migrate all --torch generate`` arguments (run as ``python -m migrate ARGS`` in a shell)."""
    return ["all", "--symbol", os.path.join(mx_folder, "net-symbol.json"), "--params",
            os.path.join(mx_folder, "net-0000.params"), "--settings", os.path.join(mx_folder, "settings.json"),
            "--states", os.path.join(mx_folder, "trainer.states"), "--torch", "generate", "--input-shape",
            INPUT_SHAPE, "--out", out, "--force"]


def generated_class(path: str):
    """The torch module class in the generated file (imported from its path, as any script would)."""
    spec = importlib.util.spec_from_file_location("t06_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Net  # named after the symbol file, net-symbol.json


def torch_phase(folder: str, batches: list) -> tuple:
    """Load the generated model and migrate's folder, train on ``batches``; (losses, model)."""
    import torch
    import migrate
    model = generated_class(os.path.join(folder, "model.py"))()
    optimizer, scheduler = migrate.load_migration(folder, model)
    loss_fn, losses = torch.nn.CrossEntropyLoss(reduction="sum"), []
    model.train()
    for data, label in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(torch.from_numpy(data)), torch.from_numpy(label).long())
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item() / len(label))
    return losses, model


def eval_gap(mx_folder: str, folder: str, x) -> float:
    """Relative gap of the eval-mode outputs at the hand-over: MXNet's exported files against model.py holding
    migrate's weights.safetensors (both fresh; MXNet 1.9.1 with MKLDNN returned NaN from the trained, hybridized net in
    predict mode here, and its Parameter.data() read ~1e38 after a hybridized inference forward)."""
    import torch
    with warnings.catch_warnings():  # "Cannot decide type for ... data": the input is float32, given below
        warnings.simplefilter("ignore", UserWarning)
        net = gluon.SymbolBlock.imports(os.path.join(mx_folder, "net-symbol.json"), ["data"],
                                        os.path.join(mx_folder, "net-0000.params"))
    want = net(mx.nd.array(x)).asnumpy()
    model = generated_class(os.path.join(folder, "model.py"))()
    from safetensors.torch import load_file
    model.load_state_dict(load_file(os.path.join(folder, "weights.safetensors")))
    model.eval()
    with torch.no_grad():
        got = model(torch.from_numpy(x)).numpy()
    return float(np.abs(want - got).max() / np.abs(want).max())


def compare(net, model, mx_losses, torch_losses, steps) -> dict:
    """Loss gaps per step and the largest weight gap after the torch steps."""
    state = model.state_dict()
    gaps = {name: float(np.abs(p.data().asnumpy() - state[model.MXNET_NAMES[name]].numpy()).max())
            for name, p in net.collect_params().items()}
    worst = max(gaps, key=gaps.get)
    return {"steps": steps, "loss_gaps": [abs(a - b) for a, b in zip(mx_losses[steps:], torch_losses)],
            "first_loss_rel_gap": abs(mx_losses[steps] - torch_losses[0]) / abs(mx_losses[steps]),
            "weight_gap": gaps[worst], "weight_gap_name": worst, "tensors": len(gaps)}


def main(argv=None) -> int:
    """Run tutorial 6: MXNet N steps -> ``migrate all --torch generate`` -> torch N steps, against MXNet 2N steps.

    Args:
        argv: Command-line arguments (None reads sys.argv).

    Returns:
        0, or the migrate command's exit code when it failed.

    Example:
        >>> main(["--fast", "--out", "/tmp/t06"])  # doctest: +SKIP
        0
    """
    from migrate.cli import main as migrate_main
    args = _common.parse_args(argv, "Tutorial 6: generate the torch model of an MXNet network and train on",
                              steps=6, fast_steps=3, out="tutorial_output/t06")
    start, n = time.perf_counter(), args.steps
    mx_folder, folder = os.path.join(args.out, "mxnet"), os.path.join(args.out, "migrated")
    mx_losses, batches, net = mxnet_phase(n, mx_folder)
    command = migrate_args(mx_folder, folder)
    print(f"$ python -m migrate {' '.join(command)}")
    code = migrate_main(command)
    if code != 0:
        return code
    source = open(os.path.join(folder, "model.py")).read().splitlines()
    first = max(i for i, line in enumerate(source) if "def forward" in line)  # the model class's (the last class)
    print("\nmodel.py, the start of forward:\n" + "\n".join(source[first:first + 8]) + "\n    ...")
    layers = str(generated_class(os.path.join(folder, "model.py"))()).splitlines()
    print("\nprint(model), its first layers:\n" + "\n".join(layers[:12]) + "\n  ...")
    torch_losses, model = torch_phase(folder, batches[n:])
    summary = compare(net, model, mx_losses, torch_losses, n)
    summary["eval_output_rel_gap"] = eval_gap(mx_folder, folder, batches[0][0])
    _common.write_loss_csv(os.path.join(args.out, "loss.csv"), {"mxnet": mx_losses,
                                                                "mxnet_then_torch": mx_losses[:n] + torch_losses})
    _common.write_json(os.path.join(args.out, "summary.json"), summary)
    print(f"\neval outputs: torch vs MXNet within {summary['eval_output_rel_gap']:.2g} (relative); first torch loss "
          f"within {summary['first_loss_rel_gap']:.2g} of MXNet's; after {n} torch steps the weights are within "
          f"{summary['weight_gap']:.2g} ({summary['tensors']} tensors, largest at {summary['weight_gap_name']}) "
          f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
