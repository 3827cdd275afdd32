"""export_settings / load_settings: the settings file migrate reads."""
import json
import os

import mxnet as mx
import pytest

from gluon_lr import LrTrainer, Rule, SettingsFileError, load_settings
from tests.gluon_lr.conftest import build_mlp, build_scale, train_step


def _trained(optimizer="adam", hyper=None, schedule=None, steps=5):
    net = build_mlp()
    params = dict(hyper or {}, learning_rate=0.1, wd=1e-4)
    if schedule is not None:
        params["lr_scheduler"] = schedule
    trainer = LrTrainer(net, optimizer, params, rules=[Rule("mlp_dense0_*", lr_mult=0.1), Rule("norm", wd_mult=0)])
    for step in range(steps):
        train_step(net, trainer, [mx.cpu()], seed=step)
    return net, trainer


class TestExportSettings:
    def test_document(self, tmp_path):
        """The file holds optimizer, hyperparameters, rescale_grad of the last step and every parameter."""
        _, trainer = _trained("adam", {"beta1": 0.8})
        path = tmp_path / "settings.json"
        trainer.export_settings(path)
        doc = load_settings(path)
        opt = doc["optimizer"]
        assert (doc["format"], doc["schema_version"], doc["num_update"]) == ("gluon-lr-settings", 1, 5)
        assert (opt["name"], opt["learning_rate"], opt["wd"], opt["rescale_grad"]) == ("adam", 0.1, 1e-4, 0.25)
        assert opt["hyperparameters"] == {"beta1": 0.8, "beta2": 0.999, "epsilon": 1e-8, "lazy_update": True}
        assert list(doc["params"]) == list(trainer.lr_mult)
        w = doc["params"]["mlp_dense0_weight"]
        assert (w["index"], w["shape"], w["dtype"], w["lr_mult"], w["wd_mult"], w["frozen"]) == (
            list(trainer.lr_mult).index("mlp_dense0_weight"), [4, 3], "float32", 0.1, 1.0, False)
        assert doc["params"]["mlp_batchnorm0_running_mean"]["frozen"] is True
        assert doc["params"]["mlp_batchnorm0_gamma"]["wd_mult"] == 0.0

    @pytest.mark.parametrize("optimizer,hyper,expected", [
        ("adagrad", {"eps": 1e-6}, {"eps": 1e-6}),
        ("rmsprop", {"centered": True, "gamma2": 0.8}, {"gamma1": 0.9, "gamma2": 0.8, "epsilon": 1e-8,
                                                         "centered": True, "clip_weights": None}),
        ("ftrl", {"lamda1": 0.02}, {"lamda1": 0.02, "beta": 1}),
        ("sgd", {"momentum": 0.9}, {"momentum": 0.9, "lazy_update": True}),
        ("lamb", {}, {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6, "lower_bound": None, "upper_bound": None,
                      "bias_correction": True}),
    ])
    def test_hyperparameters_by_mxnet_names(self, tmp_path, optimizer, hyper, expected):
        """Every constructor argument is written under MXNet's own name (AdaGrad's eps too)."""
        _, trainer = _trained(optimizer, hyper, steps=0)
        trainer.export_settings(tmp_path / "s.json")
        assert load_settings(tmp_path / "s.json")["optimizer"]["hyperparameters"] == expected

    @pytest.mark.parametrize("schedule", [
        mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1),
        mx.lr_scheduler.MultiFactorScheduler(step=[2, 4], factor=0.3, base_lr=0.1),
        mx.lr_scheduler.PolyScheduler(max_update=10, base_lr=0.1, pwr=2, final_lr=0.01),
        mx.lr_scheduler.CosineScheduler(max_update=10, base_lr=0.1, final_lr=0.0, warmup_steps=2),
    ], ids=["factor", "multifactor", "poly", "cosine"])
    def test_scheduler_rebuilds_same_lr(self, tmp_path, schedule):
        """The exported scheduler, rebuilt from the file, gives the optimizer's lr at every step from now on."""
        _, trainer = _trained("sgd", schedule=schedule, steps=5)
        trainer.export_settings(tmp_path / "s.json")
        doc = load_settings(tmp_path / "s.json")["lr_scheduler"]
        kind = doc.pop("type")
        rebuilt = getattr(mx.lr_scheduler, kind)(**doc)
        assert doc["base_lr"] == pytest.approx(0.1)
        for step in range(5, 12):
            assert rebuilt(step) == pytest.approx(schedule(step), abs=1e-12), f"{kind} at step {step}"

    def test_float16_dtype(self, tmp_path):
        """Parameter dtypes are written by numpy name."""
        trainer = LrTrainer(build_scale(dtype="float16"), "sgd", {"multi_precision": True})
        trainer.export_settings(tmp_path / "s.json")
        doc = load_settings(tmp_path / "s.json")
        assert {p["dtype"] for p in doc["params"].values()} == {"float16"}
        assert doc["optimizer"]["multi_precision"] is True

    def test_atomic_replace(self, tmp_path):
        """An existing file is replaced whole and no temporary file is left behind."""
        _, trainer = _trained(steps=0)
        path = tmp_path / "s.json"
        path.write_text("old")
        trainer.export_settings(path)
        assert json.loads(path.read_text())["format"] == "gluon-lr-settings"
        assert os.listdir(tmp_path) == ["s.json"]


def test_validated_once_where_it_enters(tmp_path, monkeypatch):
    """A document from load_settings is not checked again by as_settings; an edited plain copy is."""
    from mxformats import settings as fmt
    _, trainer = _trained(steps=1)
    trainer.export_settings(tmp_path / "s.json")
    document = fmt.load_settings(tmp_path / "s.json")
    calls = []
    monkeypatch.setattr(fmt, "_check_params", lambda *args: calls.append(args))
    assert fmt.as_settings(document) is document and calls == []
    edited = dict(document, num_update=-1)
    with pytest.raises(SettingsFileError, match=r"num_update must be an integer >= 0, got -1"):
        fmt.as_settings(edited)


def test_lars_default_eps_zero_round_trips(tmp_path):
    """LARS's default eps is 0 (MXNet accepts it): its settings file is written and read back."""
    net = build_mlp()
    trainer = LrTrainer(net, "lars", {"learning_rate": 0.1, "momentum": 0.9})
    train_step(net, trainer, [mx.cpu()])
    trainer.export_settings(tmp_path / "s.json")
    assert load_settings(tmp_path / "s.json")["optimizer"]["hyperparameters"]["eps"] == 0


@pytest.mark.parametrize("description, value, pattern", [
    ("zero devices", 0, r"num_devices must be an integer >= 1, got 0"),
    ("a string", "2", r"num_devices must be an integer >= 1, got '2'"),
    ("a bool", True, r"num_devices must be an integer >= 1, got True"),
])
def test_num_devices_is_checked(tmp_path, description, value, pattern):
    """An invalid num_devices is refused where the document enters, naming the field; a file without it (written
    before it existed) reads."""
    from mxformats import settings as fmt
    _, trainer = _trained(steps=1)
    document = trainer.export_settings(tmp_path / "s.json")
    with pytest.raises(SettingsFileError, match=pattern):
        fmt.as_settings(dict(document, num_devices=value))
    older = {key: value for key, value in document.items() if key != "num_devices"}
    assert "num_devices" not in fmt.as_settings(older)
