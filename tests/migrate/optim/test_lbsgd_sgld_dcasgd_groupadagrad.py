"""migrate's exact lbsgd, sgld, dcasgd and groupadagrad against real MXNet 1.9.1 (LrTrainer, unequal lr_mult groups)."""
import json
import os
import re
import tempfile

import mxnet as mx
import numpy as np
import pytest
import torch

import migrate
from migrate.cli import main
from migrate.errors import UnsupportedOptimizerError
from tests.migrate import _mx_reference as R

STEPS = 8
# The lr halves every 2 updates, so LBSGD's first parameter (which reads the lr before its count) sees other lrs.
SCHEDULE = dict(R.SCHEDULE, step=2, factor=0.5)
TOLERANCE = {"float64": 1e-12, "float32": 1e-5}
LBSGD = {"learning_rate": 0.1, "momentum": 0.9, "batch_scale": 3, "warmup_epochs": 1, "updates_per_epoch": 4}


def _net(dtype, two_d_only=False):
    """R's MLP (lr_mult 0.5 and 2.0 groups, a frozen layer); ``two_d_only``: biases frozen too (groupadagrad)."""
    net = R.mx_net(dtype)
    if two_d_only:
        for name, param in net.collect_params().items():
            if name.endswith("bias"):
                param.grad_req = "null"
    return net


def _kwargs(opt_kwargs, wd=0.01):
    return dict(opt_kwargs, wd=wd, clip_gradient=0.5)


def _states(trainer):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trainer.states")
        trainer.save_states(path)
        with open(path, "rb") as handle:
            return handle.read()


def mx_noise(seed):
    """A noise source drawing MXNet's samples: re-seeds MXNet, then ``mx.nd.random.normal(0, std)`` per call."""
    mx.random.seed(seed)

    def noise(param, std):
        dtype = "float64" if param.dtype == torch.float64 else "float32"
        return torch.from_numpy(mx.nd.random.normal(0, std, shape=tuple(param.shape), dtype=dtype).asnumpy())
    return noise


def _compare(name, opt_kwargs, dtype, **options):
    """(MXNet name, largest weight difference) between MXNet and migrate's torch optimizer (``mxnet_and_torch``)."""
    return R.largest_difference(*mxnet_and_torch(name, opt_kwargs, dtype, **options))


def mxnet_and_torch(name, opt_kwargs, dtype, two_d_only=False, wd=0.01, noise_seed=None, steps=STEPS, split=None,
                    schedule=SCHEDULE):
    """(MXNet's weights after ``steps`` LrTrainer steps, the torch model after migrate's exact optimizer's).

    ``split``: MXNet trains ``split`` steps, its states are converted, torch trains the rest from there.
    ``noise_seed``: MXNet is re-seeded with it where torch starts, and torch draws MXNet's noise (SGLD).
    """
    net = _net(dtype, two_d_only)
    data = R.batches(steps, dtype)
    trainer = R.mx_trainer(net, name, _kwargs(opt_kwargs, wd), dict(schedule, base_lr=opt_kwargs["learning_rate"]))
    start = split or 0
    R.mx_train(net, trainer, data[:start])
    settings, states, model = R.exported_settings(trainer), _states(trainer), R.torch_net(net)
    if noise_seed is not None:
        mx.random.seed(noise_seed)
    R.mx_train(net, trainer, data[start:])
    optimizer = migrate.torch_optimizer(model, settings, R.MAPPING, rescale_grad=1 / R.BATCH)  # trainer.step(BATCH)
    if split:
        assert migrate.convert_optimizer_state(states, settings, R.MAPPING, optimizer) > 0
    if noise_seed is not None:
        optimizer.noise = mx_noise(noise_seed)
    R.torch_train(model, optimizer, migrate.torch_lr_scheduler(optimizer, settings), data[start:])
    return R.weights_of(net), model


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("strategy", ["linear", "power2", "sqrt", "lars"])
def test_lbsgd_matches_mxnet(strategy, dtype):
    """LBSGD, batch_scale 3, each warmup strategy (warmup over 4 calls), momentum: 8 steps agree with MXNet."""
    worst_name, worst = _compare("lbsgd", dict(LBSGD, warmup_strategy=strategy), dtype)
    assert worst <= TOLERANCE[dtype], f"lbsgd {strategy} {dtype}: {worst_name} differs by {worst:.3g}"


@pytest.mark.parametrize("extra", [{"momentum": 0.0}, {"begin_epoch": 1, "updates_per_epoch": 2},
                                   {"batch_scale": 1, "warmup_strategy": "sqrt"}])
def test_lbsgd_variants_match_mxnet(extra):
    """LBSGD without momentum (sgd_update), from a later epoch, and batch_scale 1: float64 within 1e-12."""
    worst_name, worst = _compare("lbsgd", dict(LBSGD, **extra), "float64")
    assert worst <= 1e-12, f"lbsgd {extra}: {worst_name} differs by {worst:.3g}"


def test_lbsgd_first_update_reads_the_lr_before_its_count():
    """LBSGD's very first update (MXNet index 0) reads schedule(0), the others schedule(1): under a warmup they
    differ, and 8 steps still agree with MXNet (float64, 1e-12)."""
    warmup = dict(SCHEDULE, warmup_steps=3, warmup_begin_lr=0.01)
    worst_name, worst = _compare("lbsgd", dict(LBSGD, batch_scale=1), "float64", schedule=warmup)
    assert worst <= 1e-12, f"lbsgd under warmup: {worst_name} differs by {worst:.3g}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_dcasgd_matches_mxnet(dtype):
    """DCASGD (lamda 0.5, wd, clipping): 8 steps agree with MXNet."""
    worst_name, worst = _compare("dcasgd", {"learning_rate": 0.1, "lamda": 0.5}, dtype)
    assert worst <= TOLERANCE[dtype], f"dcasgd {dtype}: {worst_name} differs by {worst:.3g}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_groupadagrad_matches_mxnet(dtype):
    """GroupAdaGrad on 2-D weights (biases frozen; MXNet allows no wd): 8 steps agree with MXNet."""
    worst_name, worst = _compare("groupadagrad", {"learning_rate": 0.1}, dtype, two_d_only=True, wd=0.0)
    assert worst <= TOLERANCE[dtype], f"groupadagrad {dtype}: {worst_name} differs by {worst:.3g}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_ccsgd_and_test_match_mxnet(dtype):
    """MXNet's deprecated ccsgd (read as sgd) with momentum, and its ``test`` optimizer (w += rescale_grad*g; lr, wd
    and clipping ignored): 8 steps agree with MXNet."""
    worst_name, worst = _compare("ccsgd", {"learning_rate": 0.1, "momentum": 0.9}, dtype)
    assert worst <= TOLERANCE[dtype], f"ccsgd {dtype}: {worst_name} differs by {worst:.3g}"
    # test ascends the gradient of a squared loss: the weights grow geometrically, and so would any rounding
    # difference; 3 steps, the last 2 from a converted state
    worst_name, worst = _compare("test", {"learning_rate": 0.1}, dtype, steps=3)
    assert worst <= TOLERANCE[dtype], f"test {dtype}: {worst_name} differs by {worst:.3g}"
    worst_name, worst = _compare("test", {"learning_rate": 0.1}, dtype, steps=3, split=1)
    assert worst <= TOLERANCE[dtype], f"test {dtype} from a converted state: {worst_name} differs by {worst:.3g}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_sgld_with_mxnet_noise_matches_mxnet(dtype):
    """SGLD fed MXNet's own normal samples (same seed, same order): 8 steps agree with MXNet."""
    worst_name, worst = _compare("sgld", {"learning_rate": 0.01}, dtype, noise_seed=11)
    assert worst <= TOLERANCE[dtype], f"sgld {dtype}: {worst_name} differs by {worst:.3g}"


def test_sgld_noise_is_drawn():
    """The noise source matters: with torch's default noise the weights end far (> 1e-3) from MXNet's."""
    torch.manual_seed(0)
    worst_name, worst = _compare("sgld", {"learning_rate": 0.01}, "float64")
    assert worst > 1e-3, f"sgld without MXNet's noise: {worst_name} differs by only {worst:.3g}"


@pytest.mark.parametrize("name, opt_kwargs, extra", [
    ("lbsgd", dict(LBSGD, warmup_strategy="linear"), {}),
    ("lbsgd", dict(LBSGD, warmup_strategy="lars"), {}),
    ("dcasgd", {"learning_rate": 0.1, "lamda": 0.5}, {}),
    ("groupadagrad", {"learning_rate": 0.1}, {"two_d_only": True, "wd": 0.0}),
    ("sgld", {"learning_rate": 0.01}, {"noise_seed": 5}),
    ("ccsgd", {"learning_rate": 0.1, "momentum": 0.9}, {}),
])
@pytest.mark.parametrize("split", [1, 5])
def test_state_conversion_continues_mxnet(name, opt_kwargs, extra, split):
    """``split`` MXNet steps, states converted, 10 - split torch steps == 10 MXNet steps (float64, 1e-12).

    LBSGD after 1 step holds MXNet's live first gradient; after 5 a sum of 2 of its 3 gradients.
    """
    worst_name, worst = _compare(name, opt_kwargs, "float64", steps=10, split=split, **extra)
    assert worst <= 1e-12, f"{name} after {split} MXNet steps: {worst_name} differs by {worst:.3g}"


def _settings(name, hyper, wd=0.01, two_d_only=False):
    net = _net("float64", two_d_only)
    return R.settings_of(net, name, _kwargs(dict(hyper, learning_rate=0.1), wd), None), R.torch_net(net)


@pytest.mark.parametrize("name, hyper, wd, pattern", [
    ("dcasgd", {"momentum": 0.9}, 0.01, r"dcasgd with momentum 0.9 has no translation.*use momentum=0"),
    ("groupadagrad", {}, 0.01, r"groupadagrad updates 2-D weights only.*mlp_fc0_bias \(7,\)"),
])
def test_refused_as_mxnet_refuses(name, hyper, wd, pattern):
    """What MXNet cannot train (DCASGD momentum, GroupAdaGrad on 1-D) is a typed error naming the fix."""
    settings, model = _settings(name, hyper, wd)
    with pytest.raises(UnsupportedOptimizerError, match=pattern):
        migrate.torch_optimizer(model, settings, R.MAPPING)


def test_groupadagrad_refuses_weight_decay():
    """GroupAdaGrad with wd on a 2-D weight: a typed error (MXNet asserts wd == 0)."""
    settings, model = _settings("groupadagrad", {}, 0.01, two_d_only=True)
    with pytest.raises(UnsupportedOptimizerError, match=r"groupadagrad has no weight decay.*mlp_fc0_weight"):
        migrate.torch_optimizer(model, settings, R.MAPPING)


def test_lbsgd_settings_keep_begin_epoch():
    """The settings hold LBSGD's begin_epoch (MXNet stores begin_epoch * updates_per_epoch)."""
    settings, _ = _settings("lbsgd", {"begin_epoch": 3, "updates_per_epoch": 5})
    hyper = settings["optimizer"]["hyperparameters"]
    assert (hyper["begin_epoch"], hyper["updates_per_epoch"], hyper["batch_scale"]) == (3, 5, 1)


@pytest.mark.parametrize("name, opt_kwargs, filled, lost", [
    ("lbsgd", dict(LBSGD, warmup_strategy="linear"), 4, r"LBSGD momentum .* partial gradient sums"),
    ("dcasgd", {"learning_rate": 0.1, "lamda": 0.5}, 0, r"DCASGD previous weights .* not converted"),
    ("groupadagrad", {"learning_rate": 0.1}, 0, r"GroupAdaGrad row histories .* not converted"),
])
def test_stock_translation_lists_what_differs(name, opt_kwargs, filled, lost):
    """stock_torch_optimizer gives the closest torch.optim class and lists the differences; the stock state
    conversion fills what has the same meaning and lists the rest."""
    two_d_only = name == "groupadagrad"
    net = _net("float64", two_d_only)
    trainer = R.mx_trainer(net, name, _kwargs(opt_kwargs, 0.0 if two_d_only else 0.01), None)
    R.mx_train(net, trainer, R.batches(4, "float64"))
    settings, model = R.exported_settings(trainer), R.torch_net(net)
    optimizer, differences = migrate.stock_torch_optimizer(model, settings, R.MAPPING)
    expected = torch.optim.Adagrad if name == "groupadagrad" else torch.optim.SGD
    assert type(optimizer) is expected and any(f"{name.upper()[:5]}" in d.upper() for d in differences)
    done, lost_sentences = migrate.convert_stock_optimizer_state(_states(trainer), settings, R.MAPPING, optimizer)
    assert done == filled
    assert any(re.search(lost, sentence) for sentence in lost_sentences), lost_sentences


def test_stock_sgld_takes_mxnet_deterministic_step():
    """The stock SGLD (torch SGD, lr and lr_mult halved) plus MXNet's noise, added by hand, is MXNet's SGLD step
    (no clipping, rescale_grad 1, the lr halved after 2 updates): 3 steps within 1e-12 (float64)."""
    net = _net("float64")
    data = R.batches(3, "float64")
    trainer = R.mx_trainer(net, "sgld", {"learning_rate": 0.01, "wd": 0.01}, dict(SCHEDULE, base_lr=0.01))
    settings, model = R.exported_settings(trainer), R.torch_net(net)
    mx.random.seed(4)
    for x, y in data:
        with mx.autograd.record():
            loss = ((net(mx.nd.array(x, dtype=x.dtype)) - mx.nd.array(y, dtype=y.dtype)) ** 2).sum()
        loss.backward()
        trainer.step(1)
    optimizer, differences = migrate.stock_torch_optimizer(model, settings, R.MAPPING)
    scheduler = migrate.torch_lr_scheduler(optimizer, settings)
    assert any("no Langevin noise" in d for d in differences)
    noise, order = mx_noise(4), sorted((g["mx_indices"][i], g, p) for g in optimizer.param_groups
                                       for i, p in enumerate(g["params"]) if not g["frozen"])
    for x, y in data:
        optimizer.zero_grad()
        ((model(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).sum().backward()
        optimizer.step()
        with torch.no_grad():
            for _, group, param in order:
                param.add_(noise(param, (2 * group["lr"]) ** 0.5))
        scheduler.step()
    worst_name, worst = R.largest_difference(R.weights_of(net), model)
    assert worst <= 1e-12, f"stock sgld: {worst_name} differs by {worst:.3g}"


def torch_mlp():
    """Factory ``migrate all --torch`` names: R's torch MLP in float32 (weights come from the MXNet params)."""
    return R.torch_model({name: np.zeros(1, "float32") for name in R.MAPPING})


@pytest.mark.parametrize("name, opt_kwargs, extra", [
    ("lbsgd", dict(LBSGD, warmup_strategy="sqrt"), {}),
    ("sgld", {"learning_rate": 0.01}, {}),
    ("dcasgd", {"learning_rate": 0.1, "lamda": 0.5}, {}),
    ("groupadagrad", {"learning_rate": 0.1}, {"two_d_only": True, "wd": 0.0}),
])
def test_migrate_all_continues_mxnet(name, opt_kwargs, extra, tmp_path, capsys):
    """LrTrainer 4 steps, its exported files through ``migrate all``, load_migration, 4 torch steps == 8 MXNet
    steps within 1e-5 (float32; SGLD's torch noise set to MXNet's samples)."""
    net = _net("float32", extra.get("two_d_only", False))
    net.hybridize()
    data = R.batches(8, "float32")
    trainer = R.mx_trainer(net, name, _kwargs(opt_kwargs, extra.get("wd", 0.01)),
                           dict(SCHEDULE, base_lr=opt_kwargs["learning_rate"]))
    R.mx_train(net, trainer, data[:4])
    net.export(str(tmp_path / "mlp"))
    trainer.export_settings(str(tmp_path / "settings.json"))
    trainer.save_states(str(tmp_path / "trainer.states"))
    mx.random.seed(9)
    R.mx_train(net, trainer, data[4:])
    code = main(["all", "--symbol", str(tmp_path / "mlp-symbol.json"), "--params", str(tmp_path / "mlp-0000.params"),
                 "--settings", str(tmp_path / "settings.json"), "--states", str(tmp_path / "trainer.states"),
                 "--torch", "tests.migrate.optim.test_lbsgd_sgld_dcasgd_groupadagrad:torch_mlp", "--input-shape", f"1,{R.SIZES[0]}",
                 "--out", str(tmp_path / "out"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["ok"], doc.get("status")
    assert doc["optimizer"]["states_converted"] == sum(1 for p in net.collect_params().values()
                                                       if p.grad_req != "null")
    model = torch_mlp()
    optimizer, scheduler = migrate.load_migration(tmp_path / "out", model)
    assert type(optimizer).__name__.lower() == name
    if name == "sgld":
        optimizer.noise = mx_noise(9)
    R.torch_train(model, optimizer, scheduler, data[4:])
    worst_name, worst = R.largest_difference(R.weights_of(net), model)
    assert worst <= 1e-5, f"{name} after migrate all: {worst_name} differs by {worst:.3g}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_groupadagrad_on_an_embedding(dtype):
    """GroupAdaGrad on an Embedding (rows looked up several times a batch, lr_mult 0.5) and a bias-free Dense
    (lr_mult 2), 6 steps, clipping: torch agrees with MXNet (float64 1e-12, float32 1e-5)."""
    from mxnet import autograd, gluon
    mx.random.seed(2)
    net = gluon.nn.HybridSequential(prefix="emb_")
    with net.name_scope():
        net.add(gluon.nn.Embedding(10, 4, prefix="table_"), gluon.nn.Dense(3, use_bias=False, flatten=False,
                                                                         in_units=4, prefix="out_"))
    net.initialize(mx.init.Uniform(0.5))
    net.cast(dtype)
    params = net.collect_params()
    params["emb_table_weight"].lr_mult, params["emb_out_weight"].lr_mult = 0.5, 2.0
    trainer = R.mx_trainer(net, "groupadagrad", {"learning_rate": 0.1, "clip_gradient": 0.5}, None)
    settings = R.exported_settings(trainer)
    mapping = {"emb_table_weight": "0.weight", "emb_out_weight": "1.weight"}
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3, bias=False)).to(getattr(torch, dtype))
    with torch.no_grad():
        for mx_name, key in mapping.items():
            model.get_parameter(key).copy_(torch.from_numpy(params[mx_name].data().asnumpy()))
    optimizer = migrate.torch_optimizer(model, settings, mapping, rescale_grad=1 / R.BATCH)
    rng = np.random.RandomState(5)
    for _ in range(6):
        ids, y = rng.randint(0, 10, size=(R.BATCH, 3)), rng.randn(R.BATCH, 3, 3).astype(dtype)
        with autograd.record():
            loss = ((net(mx.nd.array(ids, dtype=dtype)) - mx.nd.array(y, dtype=dtype)) ** 2).sum()
        loss.backward()
        trainer.step(R.BATCH)
        optimizer.zero_grad()
        ((model(torch.from_numpy(ids)) - torch.from_numpy(y)) ** 2).sum().backward()
        optimizer.step()
    worst = max(float(np.abs(params[n].data().asnumpy() - model.get_parameter(k).detach().numpy()).max())
                for n, k in mapping.items())
    assert worst <= TOLERANCE[dtype], f"groupadagrad on an embedding ({dtype}) differs by {worst:.3g}"
