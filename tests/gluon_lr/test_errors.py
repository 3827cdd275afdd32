"""Bad input: each case raises the project's own exception, naming the thing and the fix, and changes nothing."""
import json
import math
import pickle

import mxnet as mx
import pytest
from mxnet import gluon

from gluon_lr import (DuplicateParameterError, KVStoreConfigError, LrTrainer, LrTrainerError, MultiplierError,
                      ParamsTypeError, PatternError, Rule, RuleMatchError, SettingsFileError, StatesFileError,
                      UnknownParameterError, load_settings)
from tests.gluon_lr.conftest import build_kinds_net, build_mlp, train_step


def _trainer(**kwargs):
    return LrTrainer(build_mlp(), "sgd", {"learning_rate": 0.1}, **kwargs)


def _duplicate():
    a, b = build_mlp(prefix="same_"), build_mlp(prefix="same_")
    return LrTrainer([a.collect_params(), b.collect_params()], "sgd")


def _bad_attribute():
    net = build_mlp()
    net.collect_params()["mlp_dense0_weight"].lr_mult = -1.0
    return LrTrainer(net, "sgd")


class _Custom(mx.lr_scheduler.LRScheduler):
    def __call__(self, num_update):
        return self.base_lr


CONSTRUCTION_CASES = [
    ("negative lr_mult", lambda: Rule("*", lr_mult=-0.1), MultiplierError, r"lr_mult must be a finite number >= 0"),
    ("NaN wd_mult", lambda: Rule("*", wd_mult=math.nan), MultiplierError, r"got nan"),
    ("infinite lr_mult", lambda: Rule("*", lr_mult=math.inf), MultiplierError, r"got inf"),
    ("string lr_mult", lambda: Rule("*", lr_mult="0.1"), MultiplierError, r"of type str"),
    ("bool lr_mult", lambda: Rule("*", lr_mult=True), MultiplierError, r"of type bool"),
    ("rule sets nothing", lambda: Rule("*"), MultiplierError, r"sets nothing"),
    ("invalid regex", lambda: Rule("re:dense(", lr_mult=1), PatternError, r"not a valid regex"),
    ("empty selector", lambda: Rule("", lr_mult=1), PatternError, r"non-empty string"),
    ("selector not a string", lambda: Rule(3, lr_mult=1), PatternError, r"got 3"),
    ("rule matches nothing", lambda: _trainer(rules=[Rule("mlp_dense9_*", lr_mult=0.1)]), RuleMatchError,
     r"rules\[0\] 'mlp_dense9_\*' selects no parameter.*nearest names.*mlp_dense"),
    ("kind matches nothing", lambda: _trainer(rules=[Rule("embedding", lr_mult=0.1)]), RuleMatchError,
     r"selects no parameter.*kinds present are \['bias', 'norm'\]"),
    ("depthwise without Block", lambda: LrTrainer(build_kinds_net().collect_params(), "sgd",
                                                  rules=[Rule("depthwise", lr_mult=0.1)]),
     RuleMatchError, r"pass the Block"),
    ("rules not a list", lambda: _trainer(rules=Rule("*", lr_mult=1)), ParamsTypeError, r"rules must be a list"),
    ("rule of wrong type", lambda: _trainer(rules=[("*", 0.1)]), ParamsTypeError, r"rules\[0\] must be a gluon_lr"),
    ("params an int", lambda: LrTrainer(3, "sgd"), ParamsTypeError, r"params must be a Block.*got int"),
    ("params list with a str", lambda: LrTrainer([build_mlp(), "x"], "sgd"), ParamsTypeError, r"params\[1\]"),
    ("dict of non-Parameters", lambda: LrTrainer({"w": 1.0}, "sgd"), ParamsTypeError, r"non-Parameters"),
    ("empty params", lambda: LrTrainer([], "sgd"), ParamsTypeError, r"holds no Parameter"),
    ("two Parameters one name", _duplicate, DuplicateParameterError,
     r"8 name\(s\).*'same_dense0_bias'.*id \d+.*id \d+"),
    ("invalid Parameter attribute", _bad_attribute, MultiplierError, r"Parameter 'mlp_dense0_weight'.lr_mult"),
    ("lr_mult 0 under FTRL", lambda: LrTrainer(build_mlp(), "ftrl", rules=[Rule("*", lr_mult=0)]), MultiplierError,
     r"'ftrl'.*grad_req='null'"),
    ("update_on_kvstore without kvstore", lambda: _trainer(kvstore=None, update_on_kvstore=True),
     KVStoreConfigError, r"needs a kvstore"),
]


@pytest.mark.parametrize("description,make,error,pattern", CONSTRUCTION_CASES,
                         ids=[c[0] for c in CONSTRUCTION_CASES])
def test_construction_errors(description, make, error, pattern):
    """Bad rules and params raise the project's exception with a message that names the fault."""
    with pytest.raises(error, match=pattern) as caught:
        make()
    assert isinstance(caught.value, LrTrainerError) and isinstance(caught.value, (ValueError, KeyError, TypeError))


SET_CASES = [
    ("unknown name", {"mlp_dense0_weight": 0.5, "mlp_dense0_weihgt": 1.0}, UnknownParameterError,
     r"unknown parameter name.*'mlp_dense0_weihgt'.*nearest.*'mlp_dense0_weight'"),
    ("negative value", {"mlp_dense0_weight": 0.5, "mlp_dense1_weight": -1}, MultiplierError, r"'mlp_dense1_weight'"),
    ("NaN value", {"mlp_dense1_weight": math.nan}, MultiplierError, r"got nan"),
    ("inf value", {"mlp_dense1_weight": math.inf}, MultiplierError, r"got inf"),
    ("string value", {"mlp_dense1_weight": "fast"}, MultiplierError, r"of type str"),
    ("not a mapping", [("mlp_dense1_weight", 0.1)], ParamsTypeError, r"expects a mapping"),
    ("index keys", {0: 0.1}, ParamsTypeError, r"parameter name \(str\)"),
]


@pytest.mark.parametrize("field", ["lr_mult", "wd_mult"])
@pytest.mark.parametrize("description,values,error,pattern", SET_CASES, ids=[c[0] for c in SET_CASES])
def test_set_mult_errors_leave_table(field, description, values, error, pattern):
    """A failed set_lr_mult/set_wd_mult raises and leaves the table, Parameters and optimizer as they were."""
    trainer = _trainer()
    getattr(trainer, f"set_{field}")({"mlp_dense1_bias": 0.7})
    before = dict(getattr(trainer, field))
    optimizer_before = dict(getattr(trainer.optimizer, field))
    with pytest.raises(error, match=pattern):
        getattr(trainer, f"set_{field}")(values, replace=True)
    assert dict(getattr(trainer, field)) == before
    assert dict(getattr(trainer.optimizer, field)) == optimizer_before


def test_unknown_name_is_a_key_error():
    """UnknownParameterError is a KeyError too."""
    with pytest.raises(KeyError):
        _trainer().set_lr_mult({"nope": 1.0})


def _settings(tmp_path, edit):
    trainer = _trainer()
    path = tmp_path / "s.json"
    trainer.export_settings(path)
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))
    return path


def _write(tmp_path, text):
    path = tmp_path / "f.json"
    path.write_text(text)
    return path


SETTINGS_CASES = [
    ("missing file", lambda t: t / "none.json", r"Cannot read .*none\.json.*settings file"),
    ("not JSON", lambda t: _write(t, "{oops"), r"not valid JSON"),
    ("foreign JSON", lambda t: _write(t, '{"format": "other"}'), r"not a gluon-lr settings file.*'other'"),
    ("a list", lambda t: _write(t, "[1, 2]"), r"not a gluon-lr settings file"),
    ("newer version", lambda t: _settings(t, lambda d: d.update(schema_version=2)), r"schema_version 2"),
    ("no optimizer name", lambda t: _settings(t, lambda d: d["optimizer"].pop("name")),
     r"optimizer.name must be a non-empty string, got nothing"),
    ("negative lr_mult", lambda t: _settings(t, lambda d: d["params"]["mlp_dense0_bias"].update(lr_mult=-1)),
     r"params\['mlp_dense0_bias'\].lr_mult must be a finite number"),
    ("string shape", lambda t: _settings(t, lambda d: d["params"]["mlp_dense0_bias"].update(shape="4")),
     r"shape must be a list of ints"),
    ("duplicate index", lambda t: _settings(t, lambda d: d["params"]["mlp_dense0_bias"].update(index=1)),
     r"indices must be 0..7 once each"),
    ("unknown scheduler", lambda t: _settings(t, lambda d: d.update(lr_scheduler={"type": "Step"})),
     r"lr_scheduler.type must be one of"),
]


@pytest.mark.parametrize("description,make,pattern", SETTINGS_CASES, ids=[c[0] for c in SETTINGS_CASES])
def test_load_settings_errors(tmp_path, description, make, pattern):
    """Missing, corrupt, foreign or invalid settings files raise SettingsFileError naming the field."""
    with pytest.raises(SettingsFileError, match=pattern):
        load_settings(make(tmp_path))


def _states(tmp_path, net=None):
    net = net or build_mlp()
    trainer = LrTrainer(net, "adam", {"learning_rate": 0.1})
    train_step(net, trainer, [mx.cpu()])
    trainer.save_states(tmp_path / "t.states")
    return tmp_path / "t.states"


def _stock_states(tmp_path):
    net = build_mlp()
    trainer = gluon.Trainer(net.collect_params(), "adam")
    train_step(net, trainer, [mx.cpu()])
    trainer.save_states(str(tmp_path / "stock.states"))
    return tmp_path / "stock.states"


def _mangled(tmp_path, cut):
    path = _states(tmp_path)
    data = path.read_bytes()
    path.write_bytes(cut(data))
    return path


STATES_CASES = [
    ("missing file", lambda t: t / "none.states", r"Cannot read .*none\.states.*states file"),
    ("stock Trainer file", _stock_states, r"not a gluon-lr states file.*gluon.Trainer.load_states"),
    ("truncated header", lambda t: _mangled(t, lambda d: d[:40]), r"corrupt header"),
    ("corrupt payload", lambda t: _mangled(t, lambda d: d[:-200] + b"\x00" * 10), r"optimizer states are corrupt"),
    ("wrong payload", lambda t: _mangled(t, lambda d: d[:d.index(b"}]}") + 3] + pickle.dumps([1])),
     r"expected MXNet optimizer states"),
    ("other shapes", lambda t: _states(t, _wide_mlp()),
     r"the state of 'mlp_dense0_\w+' has shape \(5.*\), the parameter has \(4"),
]


def _wide_mlp():
    net = gluon.nn.HybridSequential(prefix="mlp_")
    with net.name_scope():
        net.add(gluon.nn.Dense(5, in_units=3))
    net.initialize()
    return net


@pytest.mark.parametrize("description,make,pattern", STATES_CASES, ids=[c[0] for c in STATES_CASES])
def test_load_states_errors(tmp_path, description, make, pattern):
    """Missing, foreign, corrupt or mismatched states files raise StatesFileError; the table is unchanged."""
    path = make(tmp_path)
    trainer = LrTrainer(build_mlp(), "adam", {"learning_rate": 0.1})
    trainer.set_lr_mult({"mlp_dense0_weight": 0.3})
    before = dict(trainer.lr_mult)
    with pytest.raises(StatesFileError, match=pattern):
        trainer.load_states(path)
    assert dict(trainer.lr_mult) == before


OUTPUT_CASES = [
    ("settings into a missing folder", lambda t, tr: tr.export_settings(t / "no" / "s.json"), SettingsFileError,
     r"folder '.*no' does not exist; create it"),
    ("states into a missing folder", lambda t, tr: tr.save_states(t / "no" / "t.states"), StatesFileError,
     r"folder '.*no' does not exist; create it"),
    ("custom scheduler", lambda t, tr: LrTrainer(build_mlp(), "sgd", {"lr_scheduler": _Custom()}).export_settings(
        t / "s.json"), SettingsFileError, r"Cannot export lr scheduler _Custom"),
]


@pytest.mark.parametrize("description,call,error,pattern", OUTPUT_CASES, ids=[c[0] for c in OUTPUT_CASES])
def test_output_errors(tmp_path, description, call, error, pattern):
    """Unwritable destinations and unrepresentable schedulers raise the project's errors."""
    with pytest.raises(error, match=pattern):
        call(tmp_path, _trainer())
