"""A stock ``gluon.Trainer``'s states file and the parameter order: MXNet's file keys states by index only, so states
saved by a trainer built on another parameter order than the settings' would give equal-shaped tensors each other's
momentum. ``gluon_lr.export_settings(trainer)`` records the order on the trainer's optimizer, which MXNet pickles into
every states file saved afterwards; migrate compares it with the settings' and refuses a mismatch, and refuses a file
that carries no order unless asked to assume the settings' order (then matched by index, and said so).

The model is three Dense(8 -> 8) layers with tanh (``MxStack``; its torch twin ``TorchStack``): all weights of one
shape and all biases of another.
"""
import json
import pickle
import re
import warnings

import mxnet as mx
import numpy as np
import pytest
import torch
from mxnet import autograd, gluon

import gluon_lr
import migrate
from migrate.cli import main
from migrate.errors import StateConversionError, StatesOrderWarning
from mxformats.optimizer_state import recorded_param_names
from tests.migrate import models as M

HYPER = {"learning_rate": 0.1, "momentum": 0.9}
TORCH = "tests.migrate.optim.test_states_order:TorchStack"


class MxStack(gluon.nn.HybridBlock):
    """Three Dense(8 -> 8) with tanh."""

    def __init__(self, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.layers = gluon.nn.HybridSequential()
            self.layers.add(*[gluon.nn.Dense(8, in_units=8, activation="tanh") for _ in range(3)])

    def hybrid_forward(self, F, x):
        return self.layers(x)


class TorchStack(torch.nn.Module):
    """The torch twin of ``MxStack``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def _net():
    net = M.gluon(MxStack, prefix="stack_")
    net.hybridize()
    return net


def _train(net, trainer, steps=2, seed=0):
    """``steps`` SGD steps on seeded batches; Dropout off (train_mode=False) so that two runs can be compared."""
    rng = np.random.RandomState(seed)
    for _ in range(steps):
        with autograd.record(train_mode=False):
            loss = (net(mx.nd.array(rng.randn(3, 8))) ** 2).sum()
        loss.backward()
        trainer.step(3)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Three stock trainers of the same model, trained 2 steps: A on the parameters in order and B on them reversed,
    both exported before saving; C reversed, saved before its settings were exported. Their files and names."""
    folder = tmp_path_factory.mktemp("states-order")
    found = {"folder": folder}
    for key, reverse, export_first in (("A", False, True), ("B", True, True), ("C", True, False)):
        net = _net()
        params = list(net.collect_params().values())
        order = params[::-1] if reverse else params
        trainer = gluon.Trainer(order, "sgd", HYPER)
        settings, states = str(folder / f"settings-{key}.json"), str(folder / f"{key}.states")
        if export_first:
            gluon_lr.export_settings(trainer, settings)
        _train(net, trainer)
        trainer.save_states(states)
        if not export_first:
            gluon_lr.export_settings(trainer, settings)
        found[key] = {"settings": settings, "states": states, "names": [p.name for p in order],
                      "net": net, "trainer": trainer}
    net = found["C"]["net"]
    net.export(str(folder / "stack"))
    found["mapping"] = migrate.name_mapping(net, TorchStack(), (3, 8))
    return found


def test_the_order_travels_in_the_states_file(saved):
    """After export_settings the file MXNet's save_states writes carries the parameter names in the updater's order
    (A in order, B reversed); C, saved before, carries none."""
    for key in ("A", "B", "C"):
        with open(saved[key]["states"], "rb") as source:
            _, optimizer = pickle.loads(source.read())
        expected = saved[key]["names"] if key != "C" else None
        assert recorded_param_names(optimizer) == expected, key
    assert saved["A"]["names"] == saved["B"]["names"][::-1]


def test_mxnet_loads_the_file_and_continues_exactly(saved):
    """MXNet's own Trainer.load_states takes a file that carries the order: a fresh trainer with A's weights and
    A's loaded states takes the same next step as A, to the bit."""
    net = _net()
    for name, param in net.collect_params().items():
        param.set_data(saved["A"]["net"].collect_params()[name].data())
    trainer = gluon.Trainer(list(net.collect_params().values()), "sgd", HYPER)
    trainer.load_states(saved["A"]["states"])
    _train(net, trainer, steps=1, seed=5)
    _train(saved["A"]["net"], saved["A"]["trainer"], steps=1, seed=5)
    for name, param in net.collect_params().items():
        ours, theirs = param.data().asnumpy(), saved["A"]["net"].collect_params()[name].data().asnumpy()
        assert np.array_equal(ours, theirs), name


def _optimizer_and_conversion(convert: str, settings: str, mapping) -> tuple:
    """(a fresh torch optimizer of ``TorchStack`` for ``settings``, the function that converts states into it):
    migrate's exact one (``convert`` "exact") or the stock one."""
    model = TorchStack()
    if convert == "exact":
        return migrate.torch_optimizer(model, settings, mapping), migrate.convert_optimizer_state
    return (migrate.stock_torch_optimizer(model, settings, mapping).optimizer,
            migrate.convert_stock_optimizer_state)


# (description, states, settings, pattern of the StateConversionError; {A}, {B}: the first name of A's, B's order)
REFUSED = [
    ("another order", "B", "A", r"saved by a trainer built on another parameter order than the settings' \(\d+ of 6 "
                                r"indices differ: \[\"index 0: '{B}' in the states, '{A}' in the settings\""),
    ("no order recorded", "C", "C", r"name no parameters .*gluon_lr.export_settings\(trainer, path\) before "
                                    r"trainer.save_states.*assume_order=True"),
]


@pytest.mark.parametrize("convert", ["exact", "stock"])
@pytest.mark.parametrize("description, states, settings, pattern", REFUSED, ids=[r[0] for r in REFUSED])
def test_states_of_unproven_order_are_refused(saved, convert, description, states, settings, pattern):
    """B's states (reversed order) against A's settings: StateConversionError naming the indices and names that
    differ; C's (saved before its settings were exported, no order) by default: naming both ways on (export the
    settings before save_states; assume_order=True). The torch optimizer keeps no state."""
    optimizer, call = _optimizer_and_conversion(convert, saved[settings]["settings"], saved["mapping"])
    first = {key: re.escape(saved[key]["names"][0]) for key in ("A", "B")}
    with pytest.raises(StateConversionError, match=pattern.replace("{A}", first["A"]).replace("{B}", first["B"])):
        call(saved[states]["states"], saved[settings]["settings"], saved["mapping"], optimizer)
    assert len(optimizer.state) == 0


def test_states_of_their_own_order_convert_by_name(saved):
    """B's states with B's settings: each torch parameter gets, bit for bit, the (non-zero) momentum MXNet kept for
    the parameter of its name."""
    model = TorchStack()
    optimizer = migrate.torch_optimizer(model, saved["B"]["settings"], saved["mapping"])
    assert migrate.convert_optimizer_state(saved["B"]["states"], saved["B"]["settings"], saved["mapping"],
                                           optimizer) == 6  # 3 weights, 3 biases
    with open(saved["B"]["states"], "rb") as source:
        states, _ = pickle.loads(source.read())
    params = dict(model.named_parameters())
    for index, name in enumerate(saved["B"]["names"]):
        mx_momentum = states[index].asnumpy()
        assert np.abs(mx_momentum).max() > 0, name
        torch_momentum = optimizer.state[params[saved["mapping"][name]]]["momentum_buffer"].numpy()
        assert np.array_equal(torch_momentum, saved["mapping"].to_torch(name, mx_momentum)), name


def test_states_without_order_match_by_index_when_assumed(saved, tmp_path, capsys):
    """With assume_order=True C's file converts by index, warning StatesOrderWarning; `migrate all` exits 2 without
    --assume-states-order and 0 with it, its report saying so."""
    model = TorchStack()
    optimizer = migrate.torch_optimizer(model, saved["C"]["settings"], saved["mapping"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert migrate.convert_optimizer_state(saved["C"]["states"], saved["C"]["settings"], saved["mapping"],
                                               optimizer, assume_order=True) == 6
    assert [w.category for w in caught] == [StatesOrderWarning]
    folder = saved["folder"]
    argv = ["all", "--symbol", str(folder / "stack-symbol.json"), "--params", str(folder / "stack-0000.params"),
            "--settings", saved["C"]["settings"], "--states", saved["C"]["states"], "--torch",
            TORCH, "--input-shape", "3,8", "--out", str(tmp_path / "all")]
    assert main(argv) == 2
    line = capsys.readouterr().err.splitlines()
    assert len(line) == 1 and "--states" in line[0] and "--assume-states-order" in line[0], line
    assert not (tmp_path / "all").exists()
    assert main(argv + ["--assume-states-order"]) == 0, capsys.readouterr().err
    note = (f"note: --states {saved['C']['states']}: the MXNet states name no parameters (a stock gluon.Trainer's "
            f"file saved before gluon_lr.export_settings(trainer) recorded its order): they were matched by index")
    assert note in (tmp_path / "all" / "report.txt").read_text()
    report = json.loads((tmp_path / "all" / "report.json").read_text())
    assert len(report["optimizer"]["notes"]) == 1 and report["optimizer"]["states_converted"] == 6


def test_cli_refuses_states_of_another_order(saved, tmp_path, capsys):
    """`migrate all` with B's states and A's settings: exit 2, one line naming --states and the reorder."""
    folder = saved["folder"]
    argv = ["all", "--symbol", str(folder / "stack-symbol.json"), "--params", str(folder / "stack-0000.params"),
            "--settings", saved["A"]["settings"], "--states", saved["B"]["states"], "--torch",
            TORCH, "--input-shape", "3,8", "--out", str(tmp_path / "all")]
    assert main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "--states" in lines[0] and "another parameter order" in lines[0], lines
    assert not (tmp_path / "all").exists()
