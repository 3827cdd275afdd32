"""migrate's exact optimizers under ``multi_precision``: float32 master copies of float16/bfloat16 parameters.

The MXNet side is three float16 ``gluon.Parameter`` objects with unequal lr_mult/wd_mult trained by
``gluon_lr.LrTrainer(..., fused=False)`` (the stock MXNet update loop: ``create_state_multi_precision`` and
``update_multi_precision``) on seeded float16 gradients; the torch side is a module holding the same float16 tensors,
stepped by ``migrate.torch_optimizer`` on the same gradients. The gradients are fed through ``sum(w * G)`` in MXNet
(its backward gives exactly G) and set directly in torch, so only the optimizers are compared.
"""
import io

import mxnet as mx
import numpy as np
import pytest
import torch
from mxnet import autograd, gluon

import gluon_lr
import migrate
from migrate.errors import StateConversionError
from tests.migrate import _mx_reference as R

SHAPES = {"w0": (6, 5), "w1": (5,), "w2": (4, 6)}
MULTS = {"w0": (0.5, 1.0), "w1": (2.0, 0.0), "w2": (1.0, 2.0)}  # lr_mult, wd_mult
MAPPING = {name: name for name in SHAPES}
BATCH, STEPS = 4, 6
MASTER_RTOL = 1e-6
NOISE_SEED = 12  # MXNet is re-seeded with it where the torch steps start; torch's SGLD then draws MXNet's noise

CASES = [  # (id, MXNet name, hyperparameters)
    ("sgd-momentum", "sgd", {"learning_rate": 0.1, "momentum": 0.9}),
    ("sgd", "sgd", {"learning_rate": 0.1}),
    ("sgd-momentum-clip", "sgd", {"learning_rate": 0.1, "momentum": 0.9, "clip_gradient": 0.3}),
    ("nag-clip", "nag", {"learning_rate": 0.1, "momentum": 0.9, "clip_gradient": 0.3}),
    ("nag", "nag", {"learning_rate": 0.1, "momentum": 0.9}),
    ("adam", "adam", {"learning_rate": 0.01}),
    ("adam-clip", "adam", {"learning_rate": 0.01, "clip_gradient": 0.3}),
    ("rmsprop-centered", "rmsprop", {"learning_rate": 0.01, "centered": True}),
    ("rmsprop", "rmsprop", {"learning_rate": 0.01, "clip_gradient": 0.3}),
    ("rmsprop-centered-clip", "rmsprop", {"learning_rate": 0.01, "centered": True, "clip_gradient": 0.3,
                                          "clip_weights": 0.5}),
    ("adagrad", "adagrad", {"learning_rate": 0.1}),
    ("adadelta", "adadelta", {"learning_rate": 1.0}),
    ("adamax", "adamax", {"learning_rate": 0.01}),
    ("nadam", "nadam", {"learning_rate": 0.01}),
    ("lamb", "lamb", {"learning_rate": 0.01}),
    ("signum", "signum", {"learning_rate": 0.01, "momentum": 0.9}),
    ("ftrl", "ftrl", {"learning_rate": 0.1}),
    ("ftml", "ftml", {"learning_rate": 0.01}),
    ("lars", "lars", {"learning_rate": 20.0, "momentum": 0.9}),
    ("lbsgd", "lbsgd", {"learning_rate": 0.1, "momentum": 0.9, "batch_scale": 2, "warmup_epochs": 1,
                        "updates_per_epoch": 4}),
    ("lbsgd-sum-of-4", "lbsgd", {"learning_rate": 0.5, "batch_scale": 4, "warmup_strategy": "sqrt",
                                 "warmup_epochs": 1, "updates_per_epoch": 8}),
    ("sgld", "sgld", {"learning_rate": 0.01}),  # with MXNet's noise (NOISE_SEED), drawn on the float32 master
    ("dcasgd", "dcasgd", {"learning_rate": 0.1, "lamda": 0.5}),
]
# float16 ulps allowed per case where migrate's float32 update is not bit-exact against MXNet's kernel: none today
# (every case is bit-equal in float16; the float32 masters of most cases are 1-2 float32 ulps off, within MASTER_RTOL).
ULPS = {}
# Cases whose float32 masters are bit for bit MXNet's (compiled MXNet kernels: MultiSGDKernel, NAGMomKernel,
# FtrlUpdateKernel, AdamUpdateKernel, RMSProp(Alex)UpdateKernel; Signum's torch ops round as MXNet's kernel does).
EXACT_MASTERS = {"sgd-momentum", "sgd", "sgd-momentum-clip", "nag", "nag-clip", "signum", "ftrl", "adam", "adam-clip",
                 "rmsprop", "rmsprop-centered", "rmsprop-centered-clip"}


class Twin(torch.nn.Module):
    """The torch side: one parameter per MXNet parameter, same names."""

    def __init__(self, weights, dtype):
        super().__init__()
        for name, value in weights.items():
            setattr(self, name, torch.nn.Parameter(torch.from_numpy(value.astype(np.float32)).to(dtype)))


def _gradients(steps, seed=5):
    """Seeded float16 gradients, one dict per step (summed over a batch of BATCH: rescale_grad 1/BATCH)."""
    rng = np.random.RandomState(seed)
    return [{name: (rng.randn(*shape) * 2.0).astype(np.float16) for name, shape in SHAPES.items()}
            for _ in range(steps)]


def _mx_params():
    mx.random.seed(2)
    params = []
    for name, shape in SHAPES.items():
        param = gluon.Parameter(name, shape=shape, dtype="float16", init=mx.init.Uniform(0.5))
        param.initialize(ctx=mx.cpu())
        param.lr_mult, param.wd_mult = MULTS[name]
        params.append(param)
    return params


def _mx_steps(params, trainer, grads):
    for step in grads:
        with autograd.record():
            loss = mx.nd.add_n(*[(p.data() * mx.nd.array(step[p.name], dtype="float16")).sum() for p in params])
        loss.backward()
        trainer.step(BATCH)


def _with_mxnet_noise(optimizer):
    """SGLD draws MXNet's samples (``tests/migrate/test_exact_rare.mx_noise``) from NOISE_SEED on."""
    from tests.migrate.optim.test_lbsgd_sgld_dcasgd_groupadagrad import mx_noise
    if hasattr(optimizer, "noise"):
        optimizer.noise = mx_noise(NOISE_SEED)
    return optimizer


def _torch_steps(model, optimizer, grads):
    for step in grads:
        for name, param in model.named_parameters():
            param.grad = torch.from_numpy(step[name]).to(param.dtype)
        optimizer.step()


def _mx_run(name, hyper, split):
    """MXNet: ``split`` steps, its settings and states, then the rest; weights and masters at both points."""
    params = _mx_params()
    trainer = gluon_lr.LrTrainer(params, name, dict({"wd": 0.01}, **hyper, multi_precision=True), kvstore=None,
                                 fused=False)
    grads = _gradients(STEPS)
    initial = {p.name: p.data().asnumpy() for p in params}
    _mx_steps(params, trainer, grads[:split])
    settings = R.exported_settings(trainer)
    states = io.BytesIO()
    path = f"/tmp/mp-{name}-{id(states)}.states"
    trainer.save_states(path)
    with open(path, "rb") as handle:
        states = handle.read()
    middle = {p.name: p.data().asnumpy() for p in params}
    mx.random.seed(NOISE_SEED)
    _mx_steps(params, trainer, grads[split:])
    updater = trainer._updaters[0]
    masters = {}
    for index, param in enumerate(params):
        state = updater.states[index]
        masters[param.name] = (state[1] if name in ("sgd", "nag", "lars") else state[0]).asnumpy()
    final = {p.name: p.data().asnumpy() for p in params}
    return {"initial": initial, "middle": middle, "final": final, "masters": masters, "settings": settings,
            "states": states, "grads": grads}


def _ulps(a, b):
    """Largest distance in float16 units in the last place between two float16 arrays of the same sign pattern."""
    ia = a.astype(np.float16).view(np.int16).astype(np.int64)
    ib = b.astype(np.float16).view(np.int16).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFF), ib)
    return int(np.abs(ia - ib).max())


def _check(ref, model, optimizer, case):
    for name in SHAPES:
        param = model.get_parameter(name)
        theirs = param.detach().numpy()
        assert param.dtype == torch.float16 and _ulps(ref["final"][name], theirs) <= ULPS.get(case, 0), \
            f"{case}: float16 {name} differs by {_ulps(ref['final'][name], theirs)} ulp"
        master = optimizer.state[param]["master"]
        assert master.dtype == torch.float32
        rel = np.abs(master.numpy() - ref["masters"][name]).max() / np.abs(ref["masters"][name]).max()
        assert rel <= MASTER_RTOL, f"{case}: master of {name} differs by {rel:.3g} relative"
        assert case not in EXACT_MASTERS or rel == 0.0, f"{case}: master of {name} is not bit-equal ({rel:.3g})"
        assert np.array_equal(master.numpy().astype(np.float16), theirs), f"{case}: {name} is not its master rounded"
    moved = max(float(np.abs(ref["final"][n].astype(np.float32) - ref["initial"][n]).max()) for n in SHAPES)
    assert moved > 1e-2, f"{case}: the weights barely moved ({moved:.3g})"


@pytest.mark.parametrize("case, name, hyper", CASES, ids=[c[0] for c in CASES])
def test_float16_matches_mxnet(case, name, hyper):
    """STEPS steps from the start: float16 weights bit-equal to MXNet's, float32 masters within 1e-6 relative."""
    ref = _mx_run(name, hyper, split=0)
    model = Twin(ref["initial"], torch.float16)
    optimizer = _with_mxnet_noise(migrate.torch_optimizer(model, ref["settings"], MAPPING, rescale_grad=1 / BATCH))
    assert {g["multi_precision"] for g in optimizer.param_groups} == {True}
    assert len({g["lr"] for g in optimizer.param_groups}) == 3, "unequal lr_mult groups"
    _torch_steps(model, optimizer, ref["grads"])
    _check(ref, model, optimizer, case)
    for param in model.parameters():
        buffers = [v for k, v in optimizer.state[param].items() if torch.is_tensor(v) and v.dim()]
        assert buffers and {b.dtype for b in buffers} == {torch.float32}, f"{case}: buffers {buffers}"


@pytest.mark.parametrize("case, name, hyper", CASES, ids=[c[0] for c in CASES])
def test_state_conversion_mid_training(case, name, hyper):
    """STEPS/2 MXNet steps -> convert_optimizer_state -> STEPS/2 torch steps == STEPS MXNet steps."""
    ref = _mx_run(name, hyper, split=STEPS // 2)
    model = Twin(ref["middle"], torch.float16)
    optimizer = migrate.torch_optimizer(model, ref["settings"], MAPPING, rescale_grad=1 / BATCH)
    assert migrate.convert_optimizer_state(ref["states"], ref["settings"], MAPPING, optimizer) == len(SHAPES)
    _with_mxnet_noise(optimizer)
    for param in model.parameters():
        assert optimizer.state[param]["master"].dtype == torch.float32
    _torch_steps(model, optimizer, ref["grads"][STEPS // 2:])
    _check(ref, model, optimizer, case)


@pytest.mark.parametrize("split", [0, STEPS // 2])
def test_groupadagrad(monkeypatch, split):
    """GroupAdaGrad (MXNet's needs 2-D weights and no weight decay): float16 weights bit-equal to MXNet's, from the
    start and after converting its row histories and masters mid-training."""
    monkeypatch.setitem(globals(), "SHAPES", {"w0": (6, 5), "w2": (4, 6)})  # restored after the test
    ref = _mx_run("groupadagrad", {"learning_rate": 0.1, "wd": 0.0}, split=split)
    model = Twin(ref["middle"], torch.float16)
    mapping = {n: n for n in SHAPES}
    optimizer = migrate.torch_optimizer(model, ref["settings"], mapping, rescale_grad=1 / BATCH)
    if split:
        assert migrate.convert_optimizer_state(ref["states"], ref["settings"], mapping, optimizer) == len(SHAPES)
    _torch_steps(model, optimizer, ref["grads"][split:])
    _check(ref, model, optimizer, "groupadagrad")


def test_state_conversion_into_float32_model_takes_the_masters():
    """A float32 torch model takes MXNet's master copies as its weights (more exact than the float16 file)."""
    ref = _mx_run("adam", {"learning_rate": 0.01}, split=STEPS // 2)
    model = Twin(ref["middle"], torch.float32)
    optimizer = migrate.torch_optimizer(model, ref["settings"], MAPPING, rescale_grad=1 / BATCH)
    migrate.convert_optimizer_state(ref["states"], ref["settings"], MAPPING, optimizer)
    _torch_steps(model, optimizer, ref["grads"][STEPS // 2:])
    for name in SHAPES:
        param = model.get_parameter(name)
        assert "master" not in optimizer.state[param]
        rel = np.abs(param.detach().numpy() - ref["masters"][name]).max() / np.abs(ref["masters"][name]).max()
        assert rel <= MASTER_RTOL, f"{name} differs from MXNet's master by {rel:.3g} relative"


def test_master_refused_by_a_group_without_multi_precision():
    """States with master copies into a float16 model whose optimizer lacks multi_precision: a typed error."""
    ref = _mx_run("sgd", {"learning_rate": 0.1, "momentum": 0.9}, split=STEPS // 2)
    model = Twin(ref["middle"], torch.float16)
    settings = dict(ref["settings"], optimizer=dict(ref["settings"]["optimizer"], multi_precision=False))
    optimizer = migrate.torch_optimizer(model, settings, MAPPING, rescale_grad=1 / BATCH)
    with pytest.raises(StateConversionError, match="multi_precision=False"):
        migrate.convert_optimizer_state(ref["states"], ref["settings"], MAPPING, optimizer)


def test_stock_conversion_lists_the_masters_as_not_carried():
    """convert_stock_optimizer_state fills the moments and lists the float32 masters as not carried."""
    ref = _mx_run("adam", {"learning_rate": 0.01}, split=STEPS // 2)
    model = Twin(ref["middle"], torch.float16)
    optimizer, differences = migrate.stock_torch_optimizer(model, ref["settings"], MAPPING)
    assert any("master copy" in d for d in differences), differences
    filled, lost = migrate.convert_stock_optimizer_state(ref["states"], ref["settings"], MAPPING, optimizer)
    assert filled == len(SHAPES) and any("master copies" in d and "not carried" in d for d in lost), lost
    mean = optimizer.state[model.w0]["exp_avg"]
    assert mean.dtype == torch.float16 and float(mean.abs().max()) > 0


@pytest.mark.parametrize("name, hyper", [("sgd", {"momentum": 0.9}), ("adam", {}), ("rmsprop", {"centered": True}),
                                         ("ftrl", {})])
def test_bfloat16_keeps_float32_masters(name, hyper):
    """bfloat16 parameters under multi_precision: the master equals the float32 update of the same optimizer bit for
    bit, and the parameter is its master rounded to bfloat16; a float32 parameter in the group keeps no master.

    (Not LAMB or LARS: as MXNet does for float16, they take the weight norm of the rounded half-precision weight.)"""
    weights = {n: np.asarray(v, dtype=np.float32) for n, v in _mx_run("sgd", {"learning_rate": 0.1}, 0)["initial"]
               .items()}
    weights = {n: torch.from_numpy(v).to(torch.bfloat16).float().numpy() for n, v in weights.items()}
    half, full = Twin(weights, torch.bfloat16), Twin(weights, torch.float32)
    half.w1.data = half.w1.data.float()  # one float32 parameter among the bfloat16 ones
    options = dict(hyper, lr=0.01, weight_decay=0.01, rescale_grad=1 / BATCH)
    optimizers = [migrate.optim.OPTIMIZERS[name](model.parameters(), multi_precision=True, **options)
                  for model in (half, full)]
    grads = [{n: torch.from_numpy(g.astype(np.float32)).to(torch.bfloat16).float().numpy() for n, g in s.items()}
             for s in _gradients(STEPS)]
    _torch_steps(half, optimizers[0], grads)
    _torch_steps(full, optimizers[1], grads)
    for n in SHAPES:
        param, reference = half.get_parameter(n), full.get_parameter(n).detach()
        if n == "w1":
            assert param.dtype == torch.float32 and "master" not in optimizers[0].state[param]
            assert torch.equal(param.detach(), reference)
            continue
        master = optimizers[0].state[param]["master"]
        assert param.dtype == torch.bfloat16 and master.dtype == torch.float32
        assert torch.equal(master, reference), f"{name}: master of {n} differs by {(master - reference).abs().max()}"
        assert torch.equal(param.detach(), reference.to(torch.bfloat16))
    moved = float((full.w0.detach() - torch.from_numpy(weights["w0"])).abs().max())
    assert moved > 1e-3


def test_state_dict_round_trip_keeps_float32_masters():
    """state_dict -> load_state_dict into a fresh optimizer keeps masters and buffers float32; training continues
    identically."""
    ref = _mx_run("adam", {"learning_rate": 0.01}, split=0)
    models = [Twin(ref["initial"], torch.float16) for _ in range(2)]
    optimizers = [migrate.torch_optimizer(m, ref["settings"], MAPPING, rescale_grad=1 / BATCH) for m in models]
    _torch_steps(models[0], optimizers[0], ref["grads"][:3])
    models[1].load_state_dict(models[0].state_dict())
    optimizers[1].load_state_dict(optimizers[0].state_dict())
    assert {v.dtype for s in optimizers[1].state.values() for k, v in s.items() if k in ("master", "mean", "var")} \
        == {torch.float32}
    for model, optimizer in zip(models, optimizers):
        _torch_steps(model, optimizer, ref["grads"][3:])
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        assert torch.equal(a, b)
    _check(ref, models[0], optimizers[0], "adam")


def test_masks_hold_the_master_too():
    """An element mask (migrate.TorchControl) holds the masked elements of the parameter and of its master."""
    ref = _mx_run("adam", {"learning_rate": 0.01}, split=0)
    model = Twin(ref["initial"], torch.float16)
    optimizer = migrate.torch_optimizer(model, ref["settings"], MAPPING, rescale_grad=1 / BATCH)
    control = migrate.TorchControl(model, optimizer, MAPPING)
    mask = torch.zeros(SHAPES["w0"], dtype=torch.bool)
    mask[0] = True
    control.freeze("w0", mask=mask)
    before = model.w0.detach().clone()
    _torch_steps(model, optimizer, ref["grads"])
    master = optimizer.state[model.w0]["master"]
    assert torch.equal(model.w0.detach()[mask], before[mask]) and torch.equal(master[mask], before[mask].float())
    assert (model.w0.detach()[~mask] != before[~mask]).any()


def dense_stack():
    """The torch twin of ``MxDenseStack`` with a head without bias, as MXNet's (a factory function for ``--torch``)."""
    from tests.migrate import models as M
    model = M.TorchDenseStack()
    model.head = torch.nn.Linear(16, 3, bias=False)
    return model


def test_migrate_all_with_multi_precision_settings(tmp_path):
    """``migrate all`` on an LrTrainer with multi_precision=True exits 0 (it refused the flag before) and training
    continued from the folder equals MXNet's.

    float32 weights: MXNet 1.9.1 has no float16 FullyConnected/Convolution on CPU, so the export cannot be verified
    in float16 there; the float16 path is covered above by the optimizer and state tests.
    """
    from migrate.cli import main
    from tests.migrate import models as M
    net = M.gluon(M.MxDenseStack)
    net.hybridize()
    trainer = gluon_lr.LrTrainer(net, "adam", {"learning_rate": 0.01, "wd": 1e-3, "multi_precision": True},
                                 rules=[gluon_lr.Rule("out_*", lr_mult=2.0)], kvstore=None)
    rng = np.random.RandomState(3)
    data = [(rng.randn(BATCH, 16).astype("float32"), rng.randn(BATCH, 3).astype("float32")) for _ in range(6)]

    def train(batches):
        for x, y in batches:
            with autograd.record(train_mode=False):  # Dropout off, as in torch's eval mode below
                loss = ((net(mx.nd.array(x)) - mx.nd.array(y)) ** 2).sum()
            loss.backward()
            trainer.step(BATCH)

    train(data[:3])
    net.export(str(tmp_path / "net"))
    trainer.export_settings(str(tmp_path / "settings.json"))
    trainer.save_states(str(tmp_path / "trainer.states"))
    middle = {name: p.data().asnumpy().copy() for name, p in net.collect_params().items()}
    train(data[3:])
    out = tmp_path / "out"
    code = main(["all", "--symbol", str(tmp_path / "net-symbol.json"), "--params", str(tmp_path / "net-0000.params"),
                 "--settings", str(tmp_path / "settings.json"), "--states", str(tmp_path / "trainer.states"),
                 "--torch", "tests.migrate.optim.test_multi_precision:dense_stack", "--input-shape", "1,16",
                 "--out", str(out), "--quiet"])
    assert code == 0
    model = dense_stack()
    model.eval()
    optimizer, scheduler = migrate.load_migration(out, model)
    assert {g["multi_precision"] for g in optimizer.param_groups} == {True}
    mapping = migrate.NameMapping.load(out / "mapping.json")
    named = dict(model.named_parameters())
    worst, moved = 0.0, 0.0
    for x, y in data[3:]:
        optimizer.zero_grad()
        ((model(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).sum().backward()
        optimizer.step()
        scheduler.step()
    for mx_name, key in mapping.items():
        if key in named:
            theirs = named[key].detach().numpy()
            worst = max(worst, float(np.abs(theirs - net.collect_params()[mx_name].data().asnumpy()).max()))
            moved = max(moved, float(np.abs(theirs - middle[mx_name]).max()))
    assert worst <= 1e-5 and moved > 1e-3, (worst, moved)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nag_torch_path_equals_the_compiled_kernel(dtype):
    """NAG's torch path (CUDA, strided tensors) keeps MXNet's order of operations: bit-equal to the compiled kernel."""
    from migrate.optim import compiled
    from migrate.optim.base import kernel_float
    from migrate.optim.sgd_family import nag_mom_update_torch
    rng = np.random.RandomState(0)
    weight, grad, moment = (torch.from_numpy(rng.randn(300, 7)).to(dtype) for _ in range(3))
    rows = [(weight.clone(), grad.clone(), moment.clone()) for _ in range(2)]
    lr, wd, mom, rescale, clip = (kernel_float(v) for v in (0.0123, 1e-3, 0.9, 0.25, 0.5))
    assert compiled.update("nag_mom", [rows[0]], [lr], [wd], lambda k: [k(rescale), k(clip), k(mom), k(mom) + k(1)],
                           True) == []
    strided = [t.t().contiguous().t() for t in rows[1]]  # same values, not contiguous: the torch path
    scaled = (strided[1] * rescale).clamp_(-clip, clip)
    nag_mom_update_torch([strided[0]], [scaled], [strided[2]], lr, wd, mom)
    assert torch.equal(rows[0][0], strided[0]) and torch.equal(rows[0][2], strided[2])
    assert not torch.equal(rows[0][0], weight)
