"""Tutorial 9: an MXNet run on two devices continues on two torch ranks, sharded with FSDP2.

The story. Your MXNet model trained with ``ctx=[mx.gpu(0), mx.gpu(1)]``: each device took half of every batch,
BatchNorm took its statistics on each device's half, and the kvstore added the devices' gradients before
``trainer.step(batch_size)`` divided them by the whole batch. In torch the same job runs on two ranks: each rank its
half, FSDP2 (``fully_shard``) holding half of every parameter and of the optimizer state on each rank, and averaging
the ranks' gradients where MXNet added them. ``migrate.load_migration`` does the bookkeeping: each rank reads only its
blocks of the weights and of MXNet's converted optimizer state, and the gradient scale is MXNet's times the number of
ranks (``data_parallel_size``, torch.distributed's world size by default), so the step is MXNet's.

1. MXNet trains N steps on ``ctx=[mx.cpu(0), mx.cpu(1)]`` (tutorial 6's network, LrTrainer, momentum SGD, the head at
   lr_mult 2); the settings file records ``num_devices: 2``.
2. ``migrate all --torch generate`` writes the torch module and migrate's folder.
3. ``torchrun --standalone --nproc-per-node 2 tutorials/fsdp_recipe.py`` (printed below) trains the next N steps on
   two gloo ranks, without MXNet; MXNet trains them too, for reference.

What to expect. Each rank holds about half of the parameters; the torch losses follow MXNet's to float32 precision and
the weights stay within ~1e-6 of MXNet's after N steps. A job on another number of ranks than MXNet had devices warns
(``DeviceCountWarning``): BatchNorm would take its statistics over other slices. See "Distributed training in torch"
in the manual for DDP, checkpoints (``torch.distributed.checkpoint``) and the errors.

Run: ``python -m tutorials.t09_distributed [--steps 4] [--out tutorial_output/t09] [--fast]``. Writes under ``--out``:
``mxnet/`` (what migrate reads), ``migrated/`` (``model.py`` and what migrate wrote), ``batches.npz``, ``torch.npz``
(the weights after the torch steps) and ``summary.json``.
"""
import inspect
import os
import subprocess
import sys
import time

from tutorials import _common, fsdp_recipe
from tutorials.t06_generate import BATCH, CLASSES, SHAPE, TinySENet, migrate_args

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

from gluon_lr import LrTrainer, Rule  # noqa: E402

DEVICES = [mx.cpu(0), mx.cpu(1)]


def multi_device_step(net, trainer, loss_fn, data, label) -> float:
    """MXNet's multi-device step: each device half the batch, the summed losses' gradients added by the kvstore,
    ``trainer.step(batch)``; returns the mean loss over the batch."""
    xs, ys = (gluon.utils.split_and_load(mx.nd.array(a), DEVICES) for a in (data, label))
    with autograd.record():
        losses = [loss_fn(net(x), y) for x, y in zip(xs, ys)]
    autograd.backward(losses)
    trainer.step(len(data))
    return float(sum(loss.sum().asscalar() for loss in losses)) / len(data)


def mxnet_phase(steps: int, folder: str) -> tuple:
    """Train ``2 * steps`` steps on two devices; after ``steps`` write migrate's inputs.

    Returns:
        (losses of all 2 * steps steps, the batches, the network after 2 * steps steps).
    """
    mx.random.seed(0)
    net = TinySENet(prefix="senet_")
    net.initialize(mx.init.Xavier(), ctx=DEVICES)
    net.hybridize()
    batches = list(_common.synthetic_batches(2 * steps, CLASSES, SHAPE, BATCH))
    trainer = LrTrainer(net, "sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-4},
                        rules=[Rule("senet_dense0_*", lr_mult=2.0)])
    loss_fn, losses = gluon.loss.SoftmaxCrossEntropyLoss(), []
    for step, (data, label) in enumerate(batches, start=1):
        losses.append(multi_device_step(net, trainer, loss_fn, data, label))
        if step == steps:
            os.makedirs(folder, exist_ok=True)
            net.export(os.path.join(folder, "net"))
            trainer.export_settings(os.path.join(folder, "settings.json"))
            trainer.save_states(os.path.join(folder, "trainer.states"))
            print(f"MXNet: {steps} steps on {len(DEVICES)} devices done, migrate's inputs written to {folder}/",
                  file=sys.stderr)
    return losses, batches, net


def torch_phase(folder: str, batches: list, out: str) -> tuple:
    """The recipe on 2 gloo ranks (``torchrun``) over ``batches``; returns what it printed (stdout, stderr)."""
    data = os.path.join(out, "batches.npz")
    np.savez(data, **{f"{v}{i}": a for i, (x, y) in enumerate(batches) for v, a in (("x", x), ("y", y))})
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               fsdp_recipe.__file__, folder, data, os.path.join(out, "torch.npz")]
    print(f"$ torchrun --standalone --nproc-per-node 2 tutorials/fsdp_recipe.py {folder} {data} {out}/torch.npz")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(filter(None, [
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"torchrun failed with exit code {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout, done.stderr


def compare(net, out, mx_losses, printed, steps) -> dict:
    """Loss gaps per step (MXNet against rank 0's printed losses) and the largest weight gap."""
    import json

    import migrate
    mapping = migrate.NameMapping.load(os.path.join(out, "migrated", "mapping.json"))
    weights = np.load(os.path.join(out, "torch.npz"))
    gaps = {name: float(np.abs(p.data().asnumpy() - weights[mapping[name]]).max())
            for name, p in net.collect_params().items() if name in mapping and mapping[name] in weights.files}
    lines = printed[0].splitlines()
    torch_losses = [float(line.split()[-1]) for line in lines if line.startswith("step ")]
    worst = max(gaps, key=gaps.get)
    held = next(json.loads(line.split(" hold ")[1].split(" of ")[0]) for line in lines if line.startswith("the ranks"))
    return {"steps": steps, "loss_gaps": [abs(a - b) for a, b in zip(mx_losses[steps:], torch_losses)],
            "weight_gap": gaps[worst], "weight_gap_name": worst, "tensors": len(gaps), "held_per_rank": held,
            "warned": "DeviceCountWarning" in printed[1]}


def main(argv=None) -> int:
    """Run tutorial 9: MXNet N steps on 2 devices -> ``migrate all --torch generate`` -> FSDP2 N steps on 2 ranks.

    Args:
        argv: Command-line arguments (None reads sys.argv).

    Returns:
        0, or the migrate command's exit code when it failed.

    Example:
        >>> main(["--fast", "--out", "/tmp/t09"])  # doctest: +SKIP
        0
    """
    from migrate.cli import main as migrate_main
    args = _common.parse_args(argv, "Tutorial 9: continue an MXNet multi-device run with FSDP2 on two torch ranks",
                              steps=4, fast_steps=2, out="tutorial_output/t09")
    start, n = time.perf_counter(), args.steps
    mx_folder, folder = os.path.join(args.out, "mxnet"), os.path.join(args.out, "migrated")
    mx_losses, batches, net = mxnet_phase(n, mx_folder)
    command = migrate_args(mx_folder, folder)
    print(f"$ python -m migrate {' '.join(command)}")
    code = migrate_main(command)
    if code != 0:
        return code
    recipe = inspect.getsource(fsdp_recipe)
    print("\ntutorials/fsdp_recipe.py, what each rank runs:\n" + recipe[recipe.index("def main("):])
    printed = torch_phase(folder, batches[n:], args.out)
    print(printed[0].rstrip())
    summary = compare(net, args.out, mx_losses, printed, n)
    _common.write_json(os.path.join(args.out, "summary.json"), summary)
    print(f"\nMXNet's next {n} losses: {', '.join(f'{v:.6f}' for v in mx_losses[n:])}; the largest loss gap "
          f"{max(summary['loss_gaps']):.2g}; after {n} steps on 2 ranks the weights are within "
          f"{summary['weight_gap']:.2g} of MXNet's ({summary['tensors']} tensors, largest at "
          f"{summary['weight_gap_name']}) ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
