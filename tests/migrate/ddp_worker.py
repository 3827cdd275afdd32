"""Gluon nets trained by LrTrainer, migrated with migrate's public functions, then trained on under torch DDP.

Issue 7 point 3. For each case of ``CASES`` (SGD with momentum and a FactorScheduler; Adam and a CosineScheduler),
the MXNet half (:func:`mx_phase`, in the test process) trains ``MX_STEPS`` steps with LrTrainer (rules: a slow stem,
a fast head with more weight decay, no weight decay on biases, a frozen middle layer), writes the settings file, the
states file, the parameters and the name mapping, then continues ``STEPS`` more steps in MXNet as the reference.
Every torch run, in one process or in each DDP rank, rebuilds the migrated model and optimizer from those files with
:func:`migrated` and trains ``STEPS`` steps with :func:`torch_train`.

Run as ``python -m tests.migrate.ddp_worker OUT DIE_AT CASE_DIR...`` under ``devtools.local_cluster.run_torch_ddp``.
Each rank migrates and trains every case in turn (one process start for all cases) and writes ``OUT/{case}-rank{r}.npz``
(torch key -> value after the last step; the case is the folder's name). With ``DIE_AT`` > 0, rank 1 exits with
code 3 just before the backward pass of step ``DIE_AT`` of the first case, leaving rank 0 in the all-reduce.
"""
import os
import sys
from pathlib import Path

import numpy as np
import torch

from devtools import torch_ranks

SIZES = (5, 8, 8, 6, 3)  # stem, mid (frozen), body, head
LAYERS = ("stem", "mid", "body", "head")
LR_MULT = {"stem": 0.25, "body": 1.0, "head": 2.0}  # mid is frozen
WD_MULT = {"stem": 1.0, "body": 1.0, "head": 2.0}  # biases: 0
BATCH = 8  # samples per step in MXNet and in the one-process run; each DDP rank takes BATCH // world_size
MX_STEPS = 3  # steps trained in MXNet before the migration
STEPS = 4  # steps after it: in MXNet (the reference), in one torch process, under DDP
#: case -> (MXNet optimizer, its arguments, lr scheduler class, its arguments). The rate changes after the migration:
#: Factor halves it at updates 4 and 7 (SGD's momentum must follow), Cosine lowers it at every update.
CASES = {
    "sgd": ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}, "FactorScheduler", {"step": 3, "factor": 0.5}),
    "adam": ("adam", {"learning_rate": 0.02, "wd": 0.01}, "CosineScheduler", {"max_update": 10, "final_lr": 0.001}),
}
#: MXNet name -> torch key, the truth that ``name_mapping`` must find (the torch twin declares its layers in another
#: order and under other names, so neither names nor declaration order can give it).
TRUTH = {f"net_{mx}_{kind}": f"{t}.{kind}" for mx, t in zip(LAYERS, ("encoder", "hidden", "project", "classifier"))
         for kind in ("weight", "bias")}
FILES = {"settings": "settings.json", "states": "trainer.states", "params": "net.params", "mapping": "mapping.json"}


def rules() -> list:
    """LrTrainer rules giving LR_MULT and WD_MULT, no weight decay on biases, and the middle layer frozen."""
    from gluon_lr import Rule
    return [Rule("net_stem_*", lr_mult=LR_MULT["stem"]),
            Rule("net_head_*", lr_mult=LR_MULT["head"], wd_mult=WD_MULT["head"]),
            Rule("bias", wd_mult=0.0),
            Rule("net_mid_*", freeze=True)]


def expected_multipliers() -> dict:
    """Torch key -> (lr_mult, wd_mult) that the rules give, by hand; None for the frozen layer."""
    out = {}
    for mx_name, key in TRUTH.items():
        layer = mx_name.split("_")[1]
        out[key] = None if layer == "mid" else (LR_MULT[layer], 0.0 if key.endswith("bias") else WD_MULT[layer])
    return out


class TorchTwin(torch.nn.Module):
    """The torch twin of the Gluon net: the same layers under other names, declared head first (float64)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(11)  # any values: convert_weights overwrites them all
        self.classifier = torch.nn.Linear(SIZES[3], SIZES[4])
        self.hidden = torch.nn.Linear(SIZES[1], SIZES[2])
        self.project = torch.nn.Linear(SIZES[2], SIZES[3])
        self.encoder = torch.nn.Linear(SIZES[0], SIZES[1])
        self.double()

    def forward(self, x):
        for layer in (self.encoder, self.hidden, self.project):
            x = torch.tanh(layer(x))
        return self.classifier(x)


def shard(step: int, rank: int = 0, world: int = 1) -> tuple:
    """Rank ``rank``'s contiguous share among ``world`` ranks of the batch ``(x, y)`` of ``step`` (float64 numpy).

    Steps count from 1 in MXNet; ``world=1`` gives the whole batch.
    """
    rng = np.random.RandomState(100 + step)
    x, y = rng.randn(BATCH, SIZES[0]), rng.randn(BATCH, SIZES[-1])
    size = BATCH // world
    return x[rank * size:(rank + 1) * size], y[rank * size:(rank + 1) * size]


def mx_rate(case: str, num_update: int) -> float:
    """The learning rate MXNet's scheduler of ``CASES[case]`` gives at update ``num_update`` (a fresh scheduler)."""
    import mxnet as mx
    _, kwargs, sched_type, sched_kwargs = CASES[case]
    return getattr(mx.lr_scheduler, sched_type)(base_lr=kwargs["learning_rate"], **sched_kwargs)(num_update)


def mx_net():
    """The seeded float64 Gluon net: tanh(stem) -> tanh(mid) -> tanh(body) -> head."""
    import mxnet as mx
    from mxnet import gluon
    mx.random.seed(5)
    net = gluon.nn.HybridSequential(prefix="net_")
    with net.name_scope():
        for i, name in enumerate(LAYERS):
            act = None if name == "head" else "tanh"
            net.add(gluon.nn.Dense(SIZES[i + 1], in_units=SIZES[i], activation=act, prefix=f"{name}_"))
    net.initialize(mx.init.Uniform(0.5))
    net.cast("float64")
    return net


def _mx_train(net, trainer, steps) -> None:
    """Summed squared error over the whole batch, ``trainer.step(BATCH)`` (so rescale_grad = 1 / BATCH)."""
    import mxnet as mx
    from mxnet import autograd
    for step in steps:
        x, y = (mx.nd.array(a, dtype="float64") for a in shard(step))
        with autograd.record():
            loss = ((net(x) - y) ** 2).sum()
        loss.backward()
        trainer.step(BATCH)


def mx_weights(net) -> dict:
    """MXNet name -> numpy copy of every parameter."""
    return {name: p.data().asnumpy().copy() for name, p in net.collect_params().items()}


def mx_phase(case: str, folder: Path) -> dict:
    """Train ``CASES[case]`` in MXNet, write the files of ``FILES`` into ``folder``, then continue as the reference.

    Returns:
        ``{"migrated": weights when the files were written, "final": weights after STEPS more MXNet steps,
        "mapping": the NameMapping}``, weights as MXNet name -> array.
    """
    import mxnet as mx

    import migrate
    from gluon_lr import LrTrainer
    optimizer, kwargs, sched_type, sched_kwargs = CASES[case]
    sched = getattr(mx.lr_scheduler, sched_type)(base_lr=kwargs["learning_rate"], **sched_kwargs)
    net = mx_net()
    trainer = LrTrainer(net, optimizer, dict(kwargs, lr_scheduler=sched), kvstore=None, rules=rules())
    _mx_train(net, trainer, range(1, MX_STEPS + 1))
    trainer.export_settings(folder / FILES["settings"])
    trainer.save_states(str(folder / FILES["states"]))
    net.collect_params().save(str(folder / FILES["params"]))
    mapping = migrate.name_mapping(net, TorchTwin(), (BATCH, SIZES[0]), input_dtypes=np.float64)
    mapping.save(folder / FILES["mapping"])
    migrated_weights = mx_weights(net)
    _mx_train(net, trainer, range(MX_STEPS + 1, MX_STEPS + STEPS + 1))
    return {"migrated": migrated_weights, "final": mx_weights(net), "mapping": mapping}


def migrated(folder: Path, rescale_grad: float = None, convert_state: bool = True) -> tuple:
    """``(model, optimizer, scheduler)`` rebuilt from the files of :func:`mx_phase` with migrate's public functions.

    Args:
        folder: Where ``mx_phase`` wrote its files.
        rescale_grad: None keeps the settings' ``1 / BATCH``. Under DDP pass ``1 / (BATCH // world_size)``: DDP
            averages the ranks' gradients, each summed over BATCH // world_size samples.
        convert_state: Fill the optimizer state from MXNet's states file (False: start from empty state, a control).

    Note:
        ``torch_optimizer`` sets ``requires_grad=False`` on frozen parameters: wrap the model in DDP only after it.
        Wrapped before, DDP waits for gradients of the frozen layer: its first step runs without any all-reduce
        (each rank on its own gradients) and the second fails ("Expected to have finished reduction ...").
    """
    import migrate
    settings, states = folder / FILES["settings"], folder / FILES["states"]
    mapping = migrate.NameMapping.load(folder / FILES["mapping"])
    model = TorchTwin()
    model.load_state_dict(migrate.convert_weights(str(folder / FILES["params"]), mapping, model))
    optimizer = migrate.torch_optimizer(model, settings, mapping, rescale_grad=rescale_grad)
    if convert_state:
        migrate.convert_optimizer_state(states, settings, mapping, optimizer)
    return model, optimizer, migrate.torch_lr_scheduler(optimizer, settings)


def torch_train(model, optimizer, scheduler, rank: int = 0, world: int = 1, die_at: int = 0) -> dict:
    """``STEPS`` steps of summed squared error over this rank's share; returns torch key -> final value."""
    for step in range(MX_STEPS + 1, MX_STEPS + STEPS + 1):
        x, y = (torch.from_numpy(a) for a in shard(step, rank, world))
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).sum()
        if step == die_at and rank == 1:
            os._exit(3)
        loss.backward()
        optimizer.step()
        scheduler.step()
    module = getattr(model, "module", model)
    return {key: p.detach().numpy().copy() for key, p in module.named_parameters()}


def main(out: Path, die_at: int, folders: list) -> None:
    """One DDP rank (gloo): for each case folder, migrate, wrap in DDP, train on this rank's share of each batch."""
    rank, world = torch_ranks.init_gloo()
    for folder in folders:
        model, optimizer, scheduler = migrated(folder, rescale_grad=1.0 / (BATCH // world))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        weights = torch_train(ddp, optimizer, scheduler, rank, world, die_at)
        np.savez(out / f"{folder.name}-rank{rank}.npz", **weights)
        die_at = 0
    torch_ranks.finish()


if __name__ == "__main__":
    torch_ranks.run_rank(main, Path(sys.argv[1]), int(sys.argv[2]), [Path(arg) for arg in sys.argv[3:]])
