"""Malformed arguments at LrTrainer's constructor and calls: the project's own error naming the argument, what was
expected and the fix (``gluon_lr.arguments`` over ``mxformats.validate``), raised before anything changes: the
Parameters, the trainer (table, optimizer, its states and counts, rescale_grad, weights) and the files are as they were.

Also: LrTrainer put in place of ``mx.gluon.Trainer`` (to run an existing script with it) saves and loads its states
without calling itself, and trains as LrTrainer does.
"""
import json
import math
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

import gluon_lr
from gluon_lr import (HyperparameterError, KVStoreConfigError, LrTrainer, LrTrainerError, ParamsTypeError,
                      SettingsFileError, StatesFileError, UnknownOptimizerError)
from tests.gluon_lr.conftest import batch, build_mlp, train_step, weights

HYPER = {"learning_rate": 0.1, "momentum": 0.9}

# (description, keyword arguments of LrTrainer(build_mlp(), ...), error class, message pattern)
CONSTRUCTOR = [
    ("optimizer an int", dict(optimizer=123), ParamsTypeError,
     r"LrTrainer\(optimizer=...\) must be an optimizer name such as 'sgd' or an mx.optimizer.Optimizer, got int 123"),
    ("optimizer misspelt", dict(optimizer="sgdd"), UnknownOptimizerError,
     r"LrTrainer\(optimizer=...\) 'sgdd' is not one of the \d+ known names; nearest: \['sgd', "),
    ("optimizer ''", dict(optimizer=""), UnknownOptimizerError, r"must be a non-empty name, got ''"),
    ("optimizer_params a str", dict(optimizer="sgd", optimizer_params="lr=0.1"), ParamsTypeError,
     r"optimizer_params must be a dict of argument name \(str\) -> value, got str 'lr=0.1'"),
    ("optimizer_params unknown name", dict(optimizer="sgd", optimizer_params={"lr": 0.1}), HyperparameterError,
     r"optimizer_params \['lr'\] are not arguments of MXNet's 'sgd' optimizer.*it takes \[.*'learning_rate'"),
    ("optimizer_params with an object", dict(optimizer=mx.optimizer.SGD(), optimizer_params={"momentum": 0.9}),
     ParamsTypeError, r"optimizer_params must be None when optimizer is an SGD object"),
    ("kvstore an int", dict(optimizer="sgd", kvstore=5), KVStoreConfigError,
     r"LrTrainer\(kvstore=...\) must be a kvstore name such as 'device', an mx.kv.KVStore or None, got int 5"),
    ("kvstore misspelt", dict(optimizer="sgd", kvstore="devcie"), KVStoreConfigError,
     r"LrTrainer\(kvstore='devcie'\) is not a kvstore MXNet creates; nearest: \['device'"),
    ("compression_params a str", dict(optimizer="sgd", compression_params="2bit"), KVStoreConfigError,
     r"compression_params=...\) must be a dict"),
    ("update_on_kvstore 'yes'", dict(optimizer="sgd", update_on_kvstore="yes"), KVStoreConfigError,
     r"update_on_kvstore=...\) must be True, False or None, got str 'yes'"),
]


@pytest.mark.parametrize("description, kwargs, error, pattern", CONSTRUCTOR, ids=[c[0] for c in CONSTRUCTOR])
def test_constructor_refuses(description, kwargs, error, pattern):
    """LrTrainer(...) raises the named error (an LrTrainerError); the Parameters keep their multipliers."""
    net = build_mlp()
    net.collect_params()["mlp_dense0_weight"].lr_mult = 0.5
    with pytest.raises(error, match=pattern) as caught:
        LrTrainer(net, **kwargs)
    assert isinstance(caught.value, LrTrainerError)
    assert [p.lr_mult for p in net.collect_params().values()] == [0.5] + [1.0] * 7


def _other_model_states(folder):
    net = build_mlp(prefix="other_")
    trainer = LrTrainer(net, "sgd", HYPER)
    train_step(net, trainer, [mx.cpu()])
    trainer.save_states(os.path.join(folder, "other.states"))
    return os.path.join(folder, "other.states")


def _no_parameter_states(folder, trainer):
    from mxformats.states import MAGIC
    path = os.path.join(folder, "t.states")
    trainer.save_states(path)
    data = open(path, "rb").read()
    size = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "big")
    header = json.dumps({"format": "gluon-lr-states", "schema_version": 1, "params": []}).encode()
    with open(path, "wb") as out:
        out.write(MAGIC + len(header).to_bytes(8, "big") + header + data[len(MAGIC) + 8 + size:])
    return path


# (description, call(folder, trainer), error class, message pattern)
CALLS = [
    ("step('4')", lambda d, tr: tr.step("4"), HyperparameterError,
     r"step\(batch_size\) must be a finite number in \(0, inf\), got '4' of type str; pass a number"),
    ("step(0)", lambda d, tr: tr.step(0), HyperparameterError, r"step\(batch_size\) .*\(0, inf\), got 0.0"),
    ("step(-4)", lambda d, tr: tr.step(-4), HyperparameterError, r"got -4.0"),
    ("step(NaN)", lambda d, tr: tr.step(math.nan), HyperparameterError, r"got nan"),
    ("step(inf)", lambda d, tr: tr.step(math.inf), HyperparameterError, r"got inf"),
    ("step(ignore_stale_grad='yes')", lambda d, tr: tr.step(4, ignore_stale_grad="yes"), ParamsTypeError,
     r"step\(ignore_stale_grad=...\) must be True or False, got 'yes'"),
    ("update(0)", lambda d, tr: tr.update(0), HyperparameterError, r"update\(batch_size\) .* got 0.0"),
    ("export_settings into newdir/", lambda d, tr: tr.export_settings(os.path.join(d, "newdir") + "/"),
     SettingsFileError, r"export_settings\(path\) '.*newdir/': it is a folder path, a file path is needed; pass a "
     r"file inside it, such as '.*newdir/name'"),
    ("export_settings('')", lambda d, tr: tr.export_settings(""), SettingsFileError,
     r"export_settings\(path\): a non-empty path is needed, got ''"),
    ("export_settings(123)", lambda d, tr: tr.export_settings(123), SettingsFileError,
     r"export_settings\(path\): a path is needed, got int 123"),
    ("export_settings into a missing folder", lambda d, tr: tr.export_settings(os.path.join(d, "no", "s.json")),
     SettingsFileError, r"folder '.*no' does not exist; create it \(os.makedirs\)"),
    ("gluon_lr.export_settings into newdir/", lambda d, tr: gluon_lr.export_settings(
        _stock(), os.path.join(d, "newdir") + "/"), SettingsFileError, r"it is a folder path"),
    ("save_states into newdir/", lambda d, tr: tr.save_states(os.path.join(d, "newdir") + "/"), StatesFileError,
     r"save_states\(fname\) '.*newdir/': it is a folder path"),
    ("save_states('')", lambda d, tr: tr.save_states(""), StatesFileError, r"a non-empty path is needed"),
    ("load_states(123)", lambda d, tr: tr.load_states(123), StatesFileError,
     r"load_states\(fname\): a path is needed, got int 123"),
    ("load_states: none of the names", lambda d, tr: tr.load_states(_other_model_states(d)), StatesFileError,
     r"holds none of this trainer's 8 parameters \(the file has \['other_batchnorm0_beta'.*this trainer "
     r"\['mlp_batchnorm0_beta'"),
    ("load_states: no parameter listed", lambda d, tr: tr.load_states(_no_parameter_states(d, tr)),
     StatesFileError, r"lists no parameter"),
]


def _stock():
    return gluon.Trainer(build_mlp().collect_params(), "sgd", HYPER)


def _snapshot(net, trainer) -> dict:
    """What a refused call must leave alone."""
    optimizer = trainer.optimizer
    updater = trainer._updaters[0]
    return {"lr_mult": dict(trainer.lr_mult), "optimizer": id(optimizer), "num_update": optimizer.num_update,
            "rescale_grad": optimizer.rescale_grad, "lr": trainer.learning_rate,
            "states": {i: s.asnumpy().copy() for i, s in updater.states.items()}, "weights": weights(net)}


@pytest.mark.parametrize("description, call, error, pattern", CALLS, ids=[c[0] for c in CALLS])
def test_calls_refuse_and_change_nothing(tmp_path, description, call, error, pattern):
    """The call raises the named error; the trainer (table, optimizer, rescale_grad, momentum, update count,
    weights) is exactly as before and no file appears but the ones the case itself wrote."""
    net = build_mlp()
    trainer = LrTrainer(net, "sgd", HYPER)
    train_step(net, trainer, [mx.cpu()])
    before = _snapshot(net, trainer)
    with pytest.raises(error, match=pattern) as caught:
        call(str(tmp_path), trainer)
    assert isinstance(caught.value, LrTrainerError)
    after = _snapshot(net, trainer)
    for key in ("lr_mult", "optimizer", "num_update", "rescale_grad", "lr"):
        assert before[key] == after[key], f"{description}: {key} changed"
    for group in ("states", "weights"):
        assert before[group].keys() == after[group].keys()
        assert all(np.array_equal(before[group][k], after[group][k]) for k in before[group]), group
    assert not [n for n in os.listdir(tmp_path) if n not in ("other.states", "t.states")], os.listdir(tmp_path)


def test_valid_arguments_still_work():
    """Accepted forms keep working: a mixed-case registered name, a KVStore object, a numpy batch size, an Optimizer
    object; the steps equal the stock Trainer's exactly."""
    net, stock_net = build_mlp(), build_mlp()
    trainer = LrTrainer(net, "SGD", HYPER, kvstore=mx.kv.create("local"))
    stock = gluon.Trainer(stock_net.collect_params(), "sgd", HYPER, kvstore="local")
    for model, optimizer, size in ((net, trainer, np.int64(4)), (stock_net, stock, 4)):
        for seed in range(2):
            with autograd.record():
                loss = (model(batch(mx.cpu(), seed=seed)) ** 2).sum()
            loss.backward()
            optimizer.step(size)
    ours, theirs = weights(net), weights(stock_net)
    assert all(np.array_equal(ours[k], theirs[k]) for k in theirs)
    adam = LrTrainer(build_mlp(), mx.optimizer.Adam(learning_rate=0.01), kvstore=None)
    assert type(adam.optimizer) is mx.optimizer.Adam and adam.learning_rate == 0.01


@pytest.mark.parametrize("update_on_kvstore", [False, True], ids=["updater", "kvstore"])
def test_as_mx_gluon_trainer(tmp_path, monkeypatch, update_on_kvstore):
    """``mx.gluon.Trainer = LrTrainer``: 2 steps, save_states, a new trainer loads them, 2 more steps: the weights
    equal an LrTrainer's 4 uninterrupted steps exactly (save_states/load_states call MXNet's own Trainer, not
    themselves)."""
    kwargs = dict(kvstore="device", update_on_kvstore=update_on_kvstore)
    reference_net = build_mlp()
    reference = LrTrainer(reference_net, "sgd", HYPER, **kwargs)
    for seed in range(4):
        train_step(reference_net, reference, [mx.cpu()], seed=seed)
    monkeypatch.setattr(mx.gluon, "Trainer", LrTrainer)
    net = build_mlp()
    first = mx.gluon.Trainer(net.collect_params(), "sgd", HYPER, **kwargs)
    for seed in range(2):
        train_step(net, first, [mx.cpu()], seed=seed)
    first.save_states(str(tmp_path / "t.states"))
    second = mx.gluon.Trainer(net.collect_params(), "sgd", HYPER, **kwargs)
    assert second.load_states(str(tmp_path / "t.states")) == []
    for seed in range(2, 4):
        train_step(net, second, [mx.cpu()], seed=seed)
    assert sorted(os.listdir(tmp_path)) == ["t.states"]
    ours, theirs = weights(net), weights(reference_net)
    assert all(np.array_equal(ours[k], theirs[k]) for k in theirs), "swapped run differs"
    assert any(not np.array_equal(ours[k], weights(build_mlp())[k]) for k in ours)  # it trained
