"""Training recipes run by each worker of a local dist kvstore cluster, and by the single-process reference.

Run as ``python -m tests.gluon_lr.dist_worker SCENARIO OUT_DIR [OPTIMIZER UPDATE_ON_KVSTORE]``; every worker writes
``OUT_DIR/rank{r}.npz`` with the weights after each step (``step{k}/{name}``).
"""
import sys
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

BATCH = 4  # samples per worker and step; the single-process reference takes both workers' batches together
STEPS = 7
OPTIMIZERS = {
    "sgd": {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01},
    "adam": {"learning_rate": 0.01, "wd": 0.01},
}


def build_net(seed: int = 7, contexts: int = 1) -> gluon.nn.Sequential:
    """A seeded two-layer MLP (net_d0_weight, net_d0_bias, net_d1_weight, net_d1_bias) on `contexts` CPU contexts
    (``[mx.cpu(0), mx.cpu(1)]`` stands in for ``[mx.gpu(0), mx.gpu(1)]``: the same code path)."""
    mx.random.seed(seed)
    net = gluon.nn.Sequential(prefix="net_")
    with net.name_scope():
        net.add(gluon.nn.Dense(4, in_units=3, activation="tanh", prefix="d0_"))
        net.add(gluon.nn.Dense(2, in_units=4, prefix="d1_"))
    net.initialize(mx.init.Uniform(0.5), ctx=[mx.cpu(i) for i in range(contexts)])
    return net


def batch(step: int, rank: int) -> tuple:
    """The data worker `rank` sees at `step` (deterministic)."""
    rng = np.random.RandomState(1000 * step + rank)
    return mx.nd.array(rng.randn(BATCH, 3)), mx.nd.array(rng.randn(BATCH, 2))


def reference_batch(step: int, num_workers: int = 2) -> tuple:
    """Every worker's batch of `step`, concatenated in rank order (the single-process run's batch)."""
    parts = [batch(step, rank) for rank in range(num_workers)]
    return mx.nd.concat(*[x for x, _ in parts], dim=0), mx.nd.concat(*[y for _, y in parts], dim=0)


def make_trainer(net, optimizer: str, kvstore, update_on_kvstore):
    """LrTrainer with rules and an explicit multiplier (the table the recipe starts from)."""
    from gluon_lr import LrTrainer, Rule
    trainer = LrTrainer(net, optimizer, dict(OPTIMIZERS[optimizer]), kvstore=kvstore,
                        update_on_kvstore=update_on_kvstore,
                        rules=[Rule("net_d0_weight", lr_mult=0.1), Rule("*_bias", wd_mult=0.0)])
    trainer.set_lr_mult({"net_d1_bias": 3.0})
    return trainer


def one_step(net, trainer, x, y, global_batch: int) -> None:
    """Forward, backward (the batch split over the net's contexts) and ``trainer.step(global_batch)``."""
    contexts = net.collect_params()["net_d0_weight"].list_ctx()
    xs, ys = gluon.utils.split_and_load(x, contexts), gluon.utils.split_and_load(y, contexts)
    with autograd.record():
        losses = [gluon.loss.L2Loss()(net(xi), yi).sum() for xi, yi in zip(xs, ys)]
    autograd.backward(losses)
    trainer.step(global_batch)


def before_step(step: int, net, trainer) -> None:
    """The recipe's mid-training changes, made by every process just before `step`."""
    if step == 3:
        trainer.set_learning_rate(0.05)
    if step == 4:
        trainer.freeze("net_d0_*")  # grad_req='null': no gradient, no push, no update
    if step == 5:
        trainer.set_lr_mult({"net_d1_weight": 0.5})
    if step == 6:
        trainer.unfreeze("net_d0_*")


def snapshot(net, step: int, into: dict) -> None:
    """Record every weight after `step` as ``step{step}/{name}``."""
    for name, param in net.collect_params().items():
        into[f"step{step}/{name}"] = param.data().asnumpy().copy()


def run_recipe(net, trainer, data, global_batch: int, first: int = 1, last: int = STEPS, hook=None) -> dict:
    """Steps `first`..`last` of the recipe; `data(step)` gives (x, y); `hook(step)` runs after each step."""
    record = {}
    for step in range(first, last + 1):
        before_step(step, net, trainer)
        one_step(net, trainer, *data(step), global_batch)
        snapshot(net, step, record)
        if hook is not None:
            hook(step)
    return record


# ---------------------------------------------------------------------------------------------- scenarios
def scenario_stock(out: Path, kvstore: str) -> tuple:
    """Stock gluon.Trainer, plain SGD lr 0.1, two linear layers summed, loss ``sum(a(x) + b(x))``, steps 1-3.

    Layer a: ``lr_mult`` 0.5 / 2.0 set on its Parameters (Gluon's way). Layer b: the same multipliers set
    index-keyed on the optimizer before the first step (``optimizer.set_lr_mult({index: mult})``). Before step 3
    the worker sets the learning rate to 0. Then ``save_states`` is tried.
    """
    kv = mx.kv.create(kvstore)
    layers = [gluon.nn.Dense(2, in_units=3, prefix=f"{p}_") for p in "ab"]
    params = gluon.ParameterDict()
    for layer in layers:
        layer.initialize(mx.init.One())
        params.update(layer.collect_params())
    layers[0].weight.lr_mult, layers[0].bias.lr_mult = 0.5, 2.0
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.1}, kvstore=kv)
    index = trainer._param2idx  # Gluon orders the parameters by name
    trainer._optimizer.set_lr_mult({index["b_weight"]: 0.5, index["b_bias"]: 2.0})
    record = {}
    for step in (1, 2, 3):
        if step == 3:
            trainer.set_learning_rate(0.0)  # a later change: it stays on the worker
        x = mx.nd.ones((BATCH, 3)) * (kv.rank + step)
        with autograd.record():
            loss = (layers[0](x) + layers[1](x)).sum()
        loss.backward()
        trainer.step(2 * BATCH)
        for layer in layers:
            snapshot(layer, step, record)
    try:
        trainer.save_states(str(out / f"stock{kv.rank}.states"))
        record["save_error"] = np.array("")
    except AssertionError as err:
        record["save_error"] = np.array(str(err))
    return kv.rank, record


def scenario_linear(out: Path, kvstore: str) -> tuple:
    """A linear model with loss ``sum(net(x))`` and plain SGD: its gradients do not depend on the weights, so the
    result does not depend on the order in which (async) servers apply the pushes, and is checkable by hand.

    LrTrainer with ``lr_mult`` 0.5 / 2.0 set on the Parameters; before step 3 (after a barrier: every push of steps
    1-2 applied) the learning rate becomes 0.01 and the bias's lr_mult 0.0; steps 1-4. Then an element mask is tried.
    """
    from gluon_lr import LrTrainer
    kv = mx.kv.create(kvstore)
    net = gluon.nn.Dense(2, in_units=3, prefix="lin_")
    net.initialize(mx.init.One())
    net.weight.lr_mult, net.bias.lr_mult = 0.5, 2.0
    trainer = LrTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=kv)
    for step in (1, 2, 3, 4):
        if step == 3:
            _all_pushes_applied(kv)
            trainer.set_learning_rate(0.01)
            trainer.set_lr_mult({"lin_bias": 0.0})
        x = mx.nd.ones((BATCH, 3)) * (kv.rank + step)
        with autograd.record():
            loss = net(x).sum()
        loss.backward()
        trainer.step(2 * BATCH)
    _all_pushes_applied(kv)  # the other worker's last push too (dist_async)
    for index, param in enumerate(trainer._params):
        kv.pull(index, out=param.data())
    record = {}
    snapshot(net, 0, record)
    record["mask_refused"] = np.array(_mask_refused(net, trainer))
    return kv.rank, record


def _mask_refused(net, trainer) -> str:
    """Try to mask elements of a parameter the servers update; return the error's message, or ''."""
    from gluon_lr import LrTrainerError
    try:
        trainer.freeze("lin_weight", mask=np.eye(2, 3))
        _linear_step(net, trainer, 1)
    except LrTrainerError as err:
        return str(err)
    return ""


def _linear_step(net, trainer, scale: float) -> None:
    with autograd.record():
        loss = net(mx.nd.ones((BATCH, 3)) * scale).sum()
    loss.backward()
    trainer.step(2 * BATCH)


def _all_pushes_applied(kv) -> None:
    mx.nd.waitall()
    kv._barrier()


def scenario_recipe(out: Path, kvstore: str, optimizer: str, update_on_kvstore: str, contexts: str = "1") -> tuple:
    """The full recipe with LrTrainer on a dist kvstore; rank 0 saves params and states after step 5."""
    kv = mx.kv.create(kvstore)
    net = build_net(contexts=int(contexts))
    trainer = make_trainer(net, optimizer, kv, update_on_kvstore == "True")

    def save(step):
        if step == 5 and kv.rank == 0:
            save_step5(net, trainer, out)

    record = run_recipe(net, trainer, lambda step: batch(step, kv.rank), 2 * BATCH, hook=save)
    trainer.export_settings(out / f"settings-rank{kv.rank}.json")  # num_devices: workers times contexts
    return kv.rank, record


def resume(net, trainer, folder: Path) -> None:
    """Load ``folder/step5.params`` and ``folder/step5.states`` (written by `scenario_recipe` or `save_step5`)."""
    net.load_parameters(str(folder / "step5.params"))
    trainer.set_lr_mult({"net_d1_weight": 0.5})  # the table as it was at step 5 (load_states restores it too)
    trainer.load_states(str(folder / "step5.states"))


def save_step5(net, trainer, folder: Path) -> None:
    """Write ``folder/step5.params`` and ``folder/step5.states``."""
    net.save_parameters(str(folder / "step5.params"))
    trainer.save_states(str(folder / "step5.states"))


def scenario_resume(out: Path, kvstore: str, optimizer: str, update_on_kvstore: str, folder: str) -> tuple:
    """A fresh job: load the step-5 params and states in `folder`, run steps 6..7."""
    kv = mx.kv.create(kvstore)
    net = build_net(seed=123)  # different init: everything must come from the files
    trainer = make_trainer(net, optimizer, kv, update_on_kvstore == "True")
    resume(net, trainer, Path(folder))
    return kv.rank, run_recipe(net, trainer, lambda step: batch(step, kv.rank), 2 * BATCH, first=6)


def scenario_crash(out: Path) -> tuple:
    """Worker 1 dies with an error after joining the cluster."""
    kv = mx.kv.create("dist_sync")
    if kv.rank == 1:
        raise RuntimeError("worker 1 fails on purpose")
    kv._barrier()
    return kv.rank, {}


class _ExitOnServer:
    """Unpickled on a server, this ends the server process with exit code 3."""

    def __reduce__(self):
        import os
        return os._exit, (3,)


def scenario_server_dies(out: Path) -> tuple:
    """Worker 0 makes the server exit (code 3); then every worker waits at a barrier forever."""
    import pickle
    from mxnet.kvstore.kvstore import _get_kvstore_server_command_type
    kv = mx.kv.create("dist_sync")
    if kv.rank == 0:
        body = pickle.dumps(_ExitOnServer(), 0).decode("ascii")
        kv._send_command_to_servers(_get_kvstore_server_command_type("kController"), body)
    kv._barrier()
    return kv.rank, {}


def scenario_hang(out: Path) -> tuple:
    """Every worker hangs (the harness must kill everything at its deadline)."""
    import time
    kv = mx.kv.create("dist_sync")
    time.sleep(600)
    return kv.rank, {}


def main(argv: list) -> None:
    """Run one scenario (each returns its kvstore rank and record) and write ``OUT/rank{r}.npz``."""
    scenario, out = argv[0], Path(argv[1])
    rank, record = globals()[f"scenario_{scenario}"](out, *argv[2:])
    np.savez(out / f"rank{rank}.npz", **record)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except BaseException:  # a failed worker would otherwise hang in the kvstore's finalizer
        import os
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
