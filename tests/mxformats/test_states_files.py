"""MXNet's optimizer states files read as data (no code from the file run, NDArrays decoded without MXNet) against
MXNet's own unpickling of the same bytes: ``gluon.Trainer.save_states`` (with the pickled optimizer; without and with a
kvstore that updates), ``Module.save_optimizer_states`` (without it) and ``LrTrainer.save_states`` (our header, then
MXNet's bytes), for sgd with a FactorScheduler, adam, multi-precision float16 sgd and lbsgd. Every array is equal
(dtype, shape, bits); the optimizer and its lr scheduler are their class names and attributes as plain values.
Truncated files are typed errors naming the file and where the pickle breaks."""
import pickle
import random
import re

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from gluon_lr import LrTrainer, Rule
from migrate.errors import InputFileError
from migrate.optim.mx_states import load_states
from mxformats.safe_pickle import PickledObject
from mxformats.states import split_states

OPTIMIZERS = {
    "sgd-factor": ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4,
                           "lr_scheduler": mx.lr_scheduler.FactorScheduler(step=2, factor=0.5)}, "float32"),
    "adam": ("adam", {"learning_rate": 0.01, "wd": 1e-4}, "float32"),
    "sgd-multi-precision-fp16": ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "multi_precision": True}, "float16"),
    "lbsgd": ("lbsgd", {"learning_rate": 0.1, "momentum": 0.9, "batch_scale": 3, "warmup_epochs": 1,
                        "updates_per_epoch": 4}, "float32"),
}


class _Scale(gluon.HybridBlock):
    """x * weight + bias, elementwise: what MXNet's CPU float16 kernels can train (FullyConnected cannot)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(5, 3))
            self.bias = self.params.get("bias", shape=(3,), init="ones")

    def hybrid_forward(self, F, x, weight, bias):
        return F.broadcast_add(x * weight, bias)


def _net(dtype):
    if dtype == "float16":
        net = _Scale(prefix="scale_")
        net.initialize(mx.init.Xavier(), force_reinit=True)
        net.cast(dtype)
        return net
    net = gluon.nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(gluon.nn.Dense(4, in_units=3, activation="relu"), gluon.nn.BatchNorm(in_channels=4),
                gluon.nn.Dense(2, in_units=4))
    net.initialize(mx.init.Xavier(), force_reinit=True)
    net.cast(dtype)
    return net


def _train(net, trainer, dtype, steps=3):
    rng = np.random.RandomState(0)
    for _ in range(steps):
        x = mx.nd.array(rng.randn(5, 3), dtype=dtype)
        with autograd.record():
            loss = (net(x) ** 2).sum()
        loss.backward()
        trainer.step(5)


def _trainer_file(folder, case, kind) -> tuple:
    """(the file ``kind`` wrote after 3 steps, MXNet's part of its bytes)."""
    name, kwargs, dtype = OPTIMIZERS[case]
    mx.random.seed(0)
    net = _net(dtype)
    kwargs = dict(kwargs, lr_scheduler=pickle.loads(pickle.dumps(kwargs["lr_scheduler"]))) \
        if "lr_scheduler" in kwargs else kwargs
    path = str(folder / f"{case}-{kind}.states")
    if kind == "lr-trainer":
        trainer = LrTrainer(net, name, kwargs, rules=[Rule("*bias", lr_mult=0.5)], kvstore=None)
        _train(net, trainer, dtype)
        trainer.save_states(path)
    else:
        on_kvstore = kind == "trainer-kvstore"  # a KVStore object: one device alone would get no kvstore
        trainer = gluon.Trainer(net.collect_params(), name, kwargs, kvstore=mx.kv.create("local") if on_kvstore
                                else None, update_on_kvstore=True if on_kvstore else None)
        _train(net, trainer, dtype)
        trainer.save_states(path)
    with open(path, "rb") as handle:
        return path, split_states(handle.read(), path)[1]


def _module_file(folder, case) -> tuple:
    """Module.save_optimizer_states after 3 updates (no optimizer in the file)."""
    name, kwargs, dtype = OPTIMIZERS[case]
    mx.random.seed(0)
    data = mx.sym.var("data", dtype=dtype)
    if dtype == "float16":
        weight = mx.sym.var("s_weight", shape=(5, 3), dtype=dtype)
        out = mx.sym.broadcast_add(data * weight, mx.sym.var("s_bias", shape=(3,), dtype=dtype))
    else:
        out = mx.sym.FullyConnected(mx.sym.BatchNorm(mx.sym.FullyConnected(data, num_hidden=4, name="fc1"),
                                                     name="bn"), num_hidden=2, name="fc2")
    module = mx.mod.Module(mx.sym.MakeLoss(mx.sym.sum(out ** 2)), data_names=["data"], label_names=None)
    module.bind(data_shapes=[mx.io.DataDesc("data", (5, 3), dtype=dtype)])
    module.init_params(mx.init.Xavier())
    module.init_optimizer(optimizer=name, optimizer_params=dict(kwargs, rescale_grad=0.2))
    rng = np.random.RandomState(0)
    for _ in range(3):
        module.forward_backward(mx.io.DataBatch([mx.nd.array(rng.randn(5, 3), dtype=dtype)]))
        module.update()
    path = str(folder / f"{case}-module.states")
    module.save_optimizer_states(path)
    with open(path, "rb") as handle:
        return path, handle.read()


def _assert_same_data(ours, theirs, where="states") -> None:
    """``ours`` (read as data) is MXNet's unpickled ``theirs``: arrays equal in dtype, shape and bits; optimizers and
    schedulers equal in class name and attributes (MXNet's __setstate__ adds an empty param_dict); the rest equal."""
    if isinstance(theirs, mx.nd.NDArray):
        value = theirs.asnumpy()
        assert isinstance(ours, np.ndarray), where
        assert (ours.dtype, ours.shape) == (value.dtype, value.shape) and ours.tobytes() == value.tobytes(), where
    elif isinstance(theirs, (mx.optimizer.Optimizer, mx.lr_scheduler.LRScheduler)):
        assert isinstance(ours, PickledObject) and type(ours).__name__ == type(theirs).__name__, where
        attributes = {k: v for k, v in vars(theirs).items() if k != "param_dict"}
        assert sorted(vars(ours)) == sorted(attributes), where
        for key, value in attributes.items():
            _assert_same_data(vars(ours)[key], value, f"{where}.{key}")
    elif isinstance(theirs, dict):
        assert type(ours) is type(theirs) and list(ours) == list(theirs), where
        for key in theirs:
            _assert_same_data(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _assert_same_data(a, b, f"{where}[{i}]")
    else:
        assert type(ours) is type(theirs) and (ours == theirs or ours != ours and theirs != theirs), where


KINDS = ["trainer", "trainer-kvstore", "lr-trainer", "module"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(case, kind) -> (path, MXNet's bytes) for every optimizer and writer."""
    folder = tmp_path_factory.mktemp("states")
    made = {}
    for case in OPTIMIZERS:
        for kind in KINDS:
            made[case, kind] = _module_file(folder, case) if kind == "module" else _trainer_file(folder, case, kind)
    return made


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(OPTIMIZERS))
def test_states_read_as_data_equal_mxnets_unpickling(files, case, kind):
    """load_states(path) (the torch side's reader: restricted unpickler, NDArrays decoded without MXNet) gives what
    pickle.loads under MXNet gives: the same states, and the same optimizer and lr scheduler as plain values."""
    path, raw = files[case, kind]
    names, states, optimizer = load_states(path)
    theirs = pickle.loads(raw)
    theirs_states, theirs_optimizer = theirs if isinstance(theirs, tuple) else (theirs, None)
    _assert_same_data(states, theirs_states)
    _assert_same_data(optimizer, theirs_optimizer, "optimizer")
    arrays = [a for state in states.values() for a in (state if isinstance(state, tuple) else (state,))
              if isinstance(a, np.ndarray)]
    assert arrays and any(np.abs(a.astype("float64")).max() > 0 for a in arrays if a.dtype.kind == "f")
    assert (names is not None) == (kind == "lr-trainer") and (optimizer is None) == (kind == "module")
    if kind != "module":
        assert optimizer.num_update == 3 and type(optimizer).__name__ == type(theirs_optimizer).__name__
    if case == "sgd-factor" and kind != "module":
        assert type(optimizer.lr_scheduler).__name__ == "FactorScheduler" and optimizer.lr_scheduler.count == 2
    if case == "sgd-multi-precision-fp16":  # (float32 master weight, float32 momentum) for each float16 weight
        assert {a.dtype.name for a in arrays} == {"float32"} and all(len(s) == 2 for s in states.values())


def test_truncations_are_typed_errors(files, tmp_path):
    """Cuts of each writer's file (the first 64 bytes, then 150 seeded cut points): InputFileError naming the file
    and the byte where its pickle breaks; never another exception."""
    picker = random.Random(0)
    for kind in KINDS:
        path, _ = files["adam", kind]
        with open(path, "rb") as handle:
            data = handle.read()
        cuts = sorted(set(range(min(64, len(data)))) | set(picker.sample(range(len(data)), 150)))
        cut_path = tmp_path / f"cut-{kind}.states"
        for cut in cuts:
            cut_path.write_bytes(data[:cut])
            with pytest.raises(InputFileError, match=r"cut-.*\.states") as caught:
                load_states(str(cut_path))
            message = str(caught.value)
            assert re.search(r"pickle is (cut short|broken) at byte \d+|corrupt header", message), message
