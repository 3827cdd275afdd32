"""Hostile input against gluon_lr: each case raises the project's own exception naming the thing at fault, runs no
code from a file, never hangs, and leaves the trainer and the files exactly as they were."""
import json
import math
import os
import pickle
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

from gluon_lr import (HyperparameterError, LrTrainer, LrTrainerError, MultiplierError, ParamsTypeError,
                      PatternError, Rule, SettingsFileError, StatesFileError, UnsafeStatesError, load_settings)
from mxformats.states import MAGIC
from tests.gluon_lr.conftest import build_mlp, train_step

W0 = "mlp_dense0_weight"


def _trained(optimizer="sgd", hyper=None, steps=2):
    net = build_mlp()
    hyper = {"momentum": 0.9} if hyper is None else hyper
    trainer = LrTrainer(net, optimizer, dict(hyper, learning_rate=0.1),
                        rules=[Rule("mlp_dense0_*", lr_mult=0.5)])
    for step in range(steps):
        train_step(net, trainer, [mx.cpu()], seed=step)
    return net, trainer


def _snapshot(net, trainer) -> dict:
    """Everything a failed call must leave alone: table, optimizer, its states and counts, freezing, weights."""
    updater = trainer._updaters[0]
    return {"lr_mult": dict(trainer.lr_mult), "wd_mult": dict(trainer.wd_mult), "optimizer": id(trainer.optimizer),
            "type": type(trainer.optimizer).__name__, "lr": trainer.learning_rate,
            "num_update": trainer.optimizer.num_update, "frozen": set(trainer.frozen),
            "masked": dict(trainer.masked_elements),
            "states": {i: [a.asnumpy().copy() for a in _arrays(s)] for i, s in updater.states.items()},
            "weights": {k: p.data().asnumpy().copy() for k, p in net.collect_params().items()}}


def _arrays(state):
    from mxformats.optimizer_state import state_arrays
    return state_arrays(state)


def _assert_unchanged(before: dict, after: dict) -> None:
    for key in ("lr_mult", "wd_mult", "optimizer", "type", "lr", "num_update", "frozen", "masked"):
        assert before[key] == after[key], f"{key} changed: {before[key]} -> {after[key]}"
    for group in ("states", "weights"):
        assert before[group].keys() == after[group].keys(), group
        for key in before[group]:
            for old, new in zip(np.atleast_1d(before[group][key]), np.atleast_1d(after[group][key])):
                assert np.array_equal(old, new), f"{group}[{key}] changed"


class _Evil:
    """Unpickling this runs ``os.system``: a states file must never do it."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _wrapped(raw: bytes, params: list) -> bytes:
    header = json.dumps({"format": "gluon-lr-states", "schema_version": 1, "params": params}).encode()
    return MAGIC + len(header).to_bytes(8, "big") + header + raw


def _header(trainer) -> list:
    return [{"name": n, "shape": list(p.shape), "lr_mult": 1.0, "wd_mult": 1.0}
            for n, p in zip(trainer.lr_mult, trainer._params)]


def _states_file(tmp_path, trainer, edit) -> str:
    """A states file of ``trainer`` whose (header, raw) pass through ``edit``."""
    path = tmp_path / "t.states"
    trainer.save_states(path)
    data = path.read_bytes()
    size = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "big")
    header = json.loads(data[len(MAGIC) + 8:len(MAGIC) + 8 + size])["params"]
    header, raw = edit(header, data[len(MAGIC) + 8 + size:])
    path.write_bytes(_wrapped(raw, header))
    return str(path)


def _fifo(tmp_path, name):
    path = tmp_path / name
    os.mkfifo(path)
    return str(path)


def _adam_file(tmp_path, _trainer):
    _, adam = _trained("adam", {})
    adam.save_states(tmp_path / "adam.states")
    return str(tmp_path / "adam.states")


def _evil_file(tmp_path, trainer):
    return _states_file(tmp_path, trainer, lambda h, raw: (h, pickle.dumps(_Evil(tmp_path / "pwned"))))


def _evil_optimizer_file(tmp_path, trainer):
    def edit(header, raw):
        states, optimizer = pickle.loads(raw)
        optimizer.lr_scheduler = _Evil(tmp_path / "pwned")
        return header, pickle.dumps((states, optimizer))
    return _states_file(tmp_path, trainer, edit)


def _hostile_file(name):
    """A states file of the trainer whose MXNet part is the hostile pickle ``name`` (``tests/mxformats``)."""
    from tests.mxformats.hostile_states import HOSTILE
    return lambda tmp_path, trainer: _states_file(tmp_path, trainer, lambda header, raw: (header, HOSTILE[name]))


def _deep_header_file(tmp_path, _trainer):
    from tests.mxformats.hostile_states import deep_header
    (tmp_path / "deep.states").write_bytes(deep_header())
    return str(tmp_path / "deep.states")


def _header_edit(field, value):
    def edit(header, raw):
        header[0][field] = value
        return header, raw
    return lambda tmp_path, trainer: _states_file(tmp_path, trainer, edit)


# (description, what the call does given (tmp_path, net, trainer), error class, message pattern)
TRAINER_CASES = [
    ("set_lr_mult 1e300", lambda t, n, tr: tr.set_lr_mult({W0: 1e300}), MultiplierError, r"at most 1e\+06.*1e\+300"),
    ("set_wd_mult NaN", lambda t, n, tr: tr.set_wd_mult({W0: math.nan}), MultiplierError, r"wd_mult.*got nan"),
    ("replace='no'", lambda t, n, tr: tr.set_lr_mult({W0: 0.1}, replace="no"), ParamsTypeError,
     r"replace=\.\.\.\) must be True or False, got 'no'"),
    ("hold_norm_stats='no'", lambda t, n, tr: tr.freeze("mlp_batchnorm0_*", hold_norm_stats="no"), ParamsTypeError,
     r"hold_norm_stats=\.\.\.\) must be True or False"),
    ("set_learning_rate(inf)", lambda t, n, tr: tr.set_learning_rate(math.inf), HyperparameterError,
     r"set_learning_rate\(lr\).*got inf"),
    ("set_learning_rate('fast')", lambda t, n, tr: tr.set_learning_rate("fast"), HyperparameterError, r"of type str"),
    ("load_states: Adam file into SGD", lambda t, n, tr: tr.load_states(_adam_file(t, tr)), StatesFileError,
     r"holds Adam states, this trainer runs SGD"),
    ("load_states: pickle runs os.system", lambda t, n, tr: tr.load_states(_evil_file(t, tr)), UnsafeStatesError,
     r"names (posix|os)\.system.*refused unread"),
    ("load_states: scheduler runs code", lambda t, n, tr: tr.load_states(_evil_optimizer_file(t, tr)),
     UnsafeStatesError, r"(posix|os)\.system"),
    ("load_states: lr_mult NaN in header", lambda t, n, tr: tr.load_states(_header_edit("lr_mult", math.nan)(t, tr)),
     StatesFileError, r"lr_mult must be a finite number"),
    ("load_states: frozen 'yes' in header", lambda t, n, tr: tr.load_states(_header_edit("frozen", "yes")(t, tr)),
     StatesFileError, r"frozen must be true or false"),
    ("load_states: damaged mask", lambda t, n, tr: tr.load_states(_header_edit("mask", "!!notbase64")(t, tr)),
     StatesFileError, r"the mask of 'mlp_\w+' cannot be read \(Only base64"),
    ("load_states: bytearray(4e9) in 32 bytes", lambda t, n, tr: tr.load_states(_hostile_file("bytearray(4e9)")(t, tr)),
     UnsafeStatesError, r"asks for a bytearray of 4,000,000,000 bytes, more than its 32 bytes hold"),
    ("load_states: 2**40 paths through shared lists",
     lambda t, n, tr: tr.load_states(_hostile_file("2**40 paths (shared lists)")(t, tr)), UnsafeStatesError,
     r"containers nest more than 32 deep"),
    ("load_states: a state sharing a list",
     lambda t, n, tr: tr.load_states(_hostile_file("a state sharing one list")(t, tr)), StatesFileError,
     r"the state of parameter index 0 is not one MXNet makes \(it holds the same list at two places"),
    ("load_states: a list nested 1e6 deep", lambda t, n, tr: tr.load_states(_hostile_file("a list nested 1e6 deep")(
        t, tr)), UnsafeStatesError, r"containers nest more than 32 deep \(at byte 1000037\)"),
    ("load_states: an NDArray of 2**40 floats", lambda t, n, tr: tr.load_states(
        _hostile_file("an NDArray header of 2**40 floats")(t, tr)), StatesFileError,
     r"the bytes of a pickled NDArray: NDArray values \(1099511627776 x float32\) needs 4398046511104 bytes"),
    ("load_states: header JSON 100000 deep", lambda t, n, tr: tr.load_states(_deep_header_file(t, tr)),
     StatesFileError, r"has a corrupt header \(its JSON is nested too deeply to be one"),
    ("load_states: FIFO", lambda t, n, tr: tr.load_states(_fifo(t, "p.states")), StatesFileError,
     r"is a FIFO \(named pipe\), not a regular file"),
    ("load_states: a folder", lambda t, n, tr: tr.load_states(t), StatesFileError, r"is a folder"),
    ("save_states onto a folder", lambda t, n, tr: tr.save_states(t), StatesFileError, r"it is a folder"),
    ("save_states(None)", lambda t, n, tr: tr.save_states(None), StatesFileError, r"a path is needed, got NoneType"),
    ("export_settings onto a folder", lambda t, n, tr: tr.export_settings(t), SettingsFileError, r"it is a folder"),
    ("export_settings(None)", lambda t, n, tr: tr.export_settings(None), SettingsFileError, r"got NoneType"),
]


@pytest.mark.parametrize("description, call, error, pattern", TRAINER_CASES, ids=[c[0] for c in TRAINER_CASES])
def test_trainer_refuses_and_is_unchanged(tmp_path, description, call, error, pattern):
    """The call raises the named error and the trainer (table, optimizer, states, weights) is exactly as before."""
    net, trainer = _trained()
    before = _snapshot(net, trainer)
    files = sorted(os.listdir(tmp_path))
    with pytest.raises(error, match=pattern) as caught:
        call(tmp_path, net, trainer)
    assert isinstance(caught.value, LrTrainerError)
    _assert_unchanged(before, _snapshot(net, trainer))
    assert not (tmp_path / "pwned").exists(), "the states file ran code"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-") and n not in files], "temporary left"


CONSTRUCTOR_CASES = [
    ("learning_rate NaN", dict(learning_rate=math.nan), r"\['learning_rate'\].*got nan"),
    ("learning_rate -0.1", dict(learning_rate=-0.1), r"\['learning_rate'\].*\[0, inf\), got -0.1"),
    ("wd inf", dict(wd=math.inf), r"\['wd'\].*got inf"),
    ("momentum 'abc'", dict(momentum="abc"), r"\['momentum'\].*got 'abc' of type str"),
    ("momentum 1.5", dict(momentum=1.5), r"\['momentum'\].*\[0, 1\], got 1.5"),
    ("rescale_grad 0", dict(rescale_grad=0.0), r"\['rescale_grad'\].*\(0, inf\), got 0.0"),
    ("clip_gradient -1", dict(clip_gradient=-1.0), r"\['clip_gradient'\]"),
    ("lazy_update 'no'", dict(lazy_update="no"), r"\['lazy_update'\] must be True or False"),
]


@pytest.mark.parametrize("description, params, pattern", CONSTRUCTOR_CASES, ids=[c[0] for c in CONSTRUCTOR_CASES])
def test_constructor_refuses_bad_numbers(description, params, pattern):
    """optimizer_params are checked before the trainer exists; the Parameters keep their multipliers."""
    net = build_mlp()
    with pytest.raises(HyperparameterError, match=pattern):
        LrTrainer(net, "sgd", params)
    assert all(p.lr_mult == 1.0 for p in net.collect_params().values())


def test_optimizer_object_checked_too():
    """An Optimizer object with a negative learning rate is refused like the keyword argument."""
    with pytest.raises(HyperparameterError, match=r"SGD optimizer\['learning_rate'\].*got -1.0"):
        LrTrainer(build_mlp(), mx.optimizer.SGD(learning_rate=-1.0))


def test_regex_that_overflows():
    """A regex whose repeat count overflows is a PatternError, not an OverflowError."""
    with pytest.raises(PatternError, match=r"OverflowError.*fix the pattern"):
        Rule("re:a{99999999999}", lr_mult=1.0)


def _settings_text(tmp_path, edit) -> str:
    _, trainer = _trained()
    trainer.export_settings(tmp_path / "s.json")
    text = (tmp_path / "s.json").read_text()
    return edit(text, json.loads(text))


def _doc_edit(change):
    def edit(text, document):
        change(document)
        return json.dumps(document)
    return edit


SETTINGS_CASES = [
    ("lr NaN", lambda text, doc: text.replace('"learning_rate": 0.1', '"learning_rate": NaN'), r"NaN is not a JSON"),
    ("lr Infinity", lambda text, doc: text.replace('"learning_rate": 0.1', '"learning_rate": Infinity'),
     r"Infinity is not a JSON"),
    ("wd -1", _doc_edit(lambda d: d["optimizer"].update(wd=-1)), r"optimizer\['wd'\].*got -1"),
    ("momentum 'abc'", _doc_edit(lambda d: d["optimizer"]["hyperparameters"].update(momentum="abc")),
     r"hyperparameters\['momentum'\].*'abc'"),
    ("rescale_grad 0", _doc_edit(lambda d: d["optimizer"].update(rescale_grad=0)), r"rescale_grad.*\(0, inf\)"),
    ("num_update 1e30", _doc_edit(lambda d: d.update(num_update=10 ** 30)), r"num_update must be at most"),
    ("shape [1e20]", _doc_edit(lambda d: d["params"][W0].update(shape=[10 ** 20])),
     r"params\['mlp_dense0_weight'\].shape must be a list of ints >= 0 whose product fits MXNet's sizes \(below "
     r"2\*\*63\), got \[100000000000000000000\]"),
    ("shape product past int64", _doc_edit(lambda d: d["params"][W0].update(shape=[2 ** 32, 2 ** 32])),
     r"shape must be a list of ints >= 0 whose product fits"),
    ("dtype 'banana'", _doc_edit(lambda d: d["params"][W0].update(dtype="banana")),
     r"params\['mlp_dense0_weight'\].dtype must be one of MXNet's dtype names \['float16', 'float32'.*got 'banana'"),
    ("schema_version true", _doc_edit(lambda d: d.update(schema_version=True)), r"schema_version True"),
    ("a key twice", lambda text, doc: text.replace('"num_update":', '"num_update": 3, "num_update":', 1),
     r"key 'num_update' appears twice"),
    ("100000-deep JSON", lambda text, doc: "[" * 100000 + "]" * 100000, r"not valid JSON"),
]


@pytest.mark.parametrize("description, edit, pattern", SETTINGS_CASES, ids=[c[0] for c in SETTINGS_CASES])
def test_settings_file_refused(tmp_path, description, edit, pattern):
    """load_settings names what is wrong; the file is left as it is."""
    path = tmp_path / "bad.json"
    path.write_text(_settings_text(tmp_path, edit))
    content = path.read_bytes()
    with pytest.raises(SettingsFileError, match=pattern):
        load_settings(path)
    assert path.read_bytes() == content


def test_settings_fifo_refused_without_hanging(tmp_path):
    """A FIFO is refused before it is opened (opening one would block forever)."""
    with pytest.raises(SettingsFileError, match=r"is a FIFO \(named pipe\), not a regular file"):
        load_settings(_fifo(tmp_path, "s.json"))


def test_migrate_refuses_code_in_a_stock_states_file(tmp_path):
    """migrate's state conversion reads a stock Trainer file through the same unpickler: refused, nothing runs."""
    import migrate
    from migrate.errors import InputFileError
    _, trainer = _trained()
    trainer.export_settings(tmp_path / "s.json")
    path = tmp_path / "stock.states"
    path.write_bytes(pickle.dumps(({0: _Evil(tmp_path / "pwned")}, None)))
    with pytest.raises(InputFileError, match=r"(posix|os)\.system.*refused unread"):
        migrate.convert_optimizer_state(str(path), str(tmp_path / "s.json"), {}, None)
    assert not (tmp_path / "pwned").exists()


def test_every_legitimate_states_file_still_loads(tmp_path):
    """Files of stock Trainer (with and without a scheduler) and Module round-trip through the safe unpickler."""
    from mxformats.states import unpickle_states
    for name, hyper in [("sgd", {"momentum": 0.9}), ("adam", {}), ("rmsprop", {"centered": True}), ("lamb", {}),
                        ("ftml", {}), ("nadam", {})]:
        net = build_mlp()
        sched = mx.lr_scheduler.FactorScheduler(step=1, factor=0.5)
        trainer = mx.gluon.Trainer(net.collect_params(), name, dict(hyper, lr_scheduler=sched))
        train_step(net, trainer, [mx.cpu()])
        trainer.save_states(str(tmp_path / "s.states"))
        states, optimizer = unpickle_states((tmp_path / "s.states").read_bytes(), "s.states")
        assert type(optimizer).__name__.lower() == name and len(states) == 6
        assert type(optimizer.lr_scheduler) is mx.lr_scheduler.FactorScheduler


def test_stale_temporaries_of_killed_processes_are_removed(tmp_path):
    """A temporary folder or file left by a killed process (its pid no longer runs) goes at the next save_states."""
    code = ("import os, sys; d = sys.argv[1]; os.mkdir(os.path.join(d, f'.tmp-gluon-lr-{os.getpid()}-x')); "
            "open(os.path.join(d, f'.tmp-{os.getpid()}-y'), 'w').write('half')")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    assert len(os.listdir(tmp_path)) == 2
    _, trainer = _trained()
    trainer.save_states(tmp_path / "t.states")
    assert sorted(os.listdir(tmp_path)) == ["t.states"]


def test_load_states_from_a_read_only_folder(tmp_path, monkeypatch):
    """load_states needs no write access next to the file: it uses the system's temporary folder then."""
    net, trainer = _trained()
    trainer.save_states(tmp_path / "t.states")
    folder = str(tmp_path)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if os.path.abspath(p) == folder else real_access(p, mode))
    written = []
    real_mkdtemp = __import__("tempfile").mkdtemp

    def mkdtemp(*args, **kwargs):
        written.append(kwargs.get("dir"))
        assert os.path.abspath(kwargs.get("dir")) != folder, "wrote into the read-only folder"
        return real_mkdtemp(*args, **kwargs)
    monkeypatch.setattr("tempfile.mkdtemp", mkdtemp)
    _, fresh = _trained(steps=0)
    assert fresh.load_states(tmp_path / "t.states") == []
    assert written and fresh.optimizer.num_update == trainer.optimizer.num_update


class MyMomentumSGD(mx.optimizer.SGD):
    """A user's own optimizer class, defined in an imported module."""


def test_a_users_optimizer_class_loads_when_its_module_is_imported(tmp_path):
    """A subclass of an MXNet optimizer from an imported module is admitted; an unknown module is not imported."""
    from mxformats.safe_pickle import safe_loads
    net = build_mlp()
    trainer = mx.gluon.Trainer(net.collect_params(), MyMomentumSGD(momentum=0.9, learning_rate=0.1))
    train_step(net, trainer, [mx.cpu()])
    trainer.save_states(str(tmp_path / "s.states"))
    data = (tmp_path / "s.states").read_bytes()
    assert type(safe_loads(data, "s.states")[1]) is MyMomentumSGD
    foreign = data.replace(b"tests.gluon_lr.test_hostile", b"tests.gluon_lr.not_imported")
    with pytest.raises(UnsafeStatesError, match=r"tests\.gluon_lr\.not_imported\.MyMomentumSGD"):
        safe_loads(foreign, "s.states")
    assert "tests.gluon_lr.not_imported" not in sys.modules
