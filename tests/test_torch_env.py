"""The torch side in an environment without MXNet (./.venv-torch: numpy 2, torch 2.14.1, no mxnet), against MXNet
runs made here (./.venv: MXNet 1.9.1, numpy 1.23.5).

``scripts/test.sh`` builds ./.venv-torch (``scripts/setup_torch_env.sh``) and sets ``GLUON_LR_REQUIRE_TORCH_ENV=1``,
so a missing environment fails there; run alone without it, these tests skip.

- the torch-side tests (``tests/torch_side``) pass in it;
- every one of migrate's 19 exact MXNet optimizers, and the stock path, continue an MXNet run there exactly as they do
  here: the weights after the torch steps are equal bit for bit on numpy 2 and numpy 1.23, and within 1e-5 (float32)
  / 1e-12 (float64) of MXNet's own next steps;
- a net with BatchNorm and a depthwise conv, trained by LrTrainer (adam, lr_mult groups, a frozen layer, an element
  mask), goes through ``migrate all`` here (torch twin and ``--torch generate``) and continues there: 3 torch steps
  equal MXNet's next 3 within 1e-5;
and ``mxnet`` is never imported there.
"""
import json
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon

from gluon_lr import LrTrainer, Rule
from tests.migrate import _mx_reference as R

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_PYTHON = os.environ.get("GLUON_LR_TORCH_PYTHON", os.path.join(ROOT, ".venv-torch", "bin", "python"))
STEPS = 4
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}
LBSGD = {"learning_rate": 0.1, "momentum": 0.9, "batch_scale": 3, "warmup_epochs": 1, "updates_per_epoch": 4}
# migrate's 19 exact optimizers: (case, MXNet name, kwargs, options); R.CASES plus those it leaves out.
CASES = [(case, name, kwargs, {}) for case, name, kwargs in R.CASES] + [
    ("lbsgd", "lbsgd", LBSGD, {}),
    ("dcasgd", "dcasgd", {"learning_rate": 0.1, "lamda": 0.5}, {}),
    ("groupadagrad", "groupadagrad", {"learning_rate": 0.1}, {"two_d_only": True, "wd": 0.0}),
    ("sgld", "sgld", {"learning_rate": 0.01}, {"noise": True}),
    ("ccsgd", "ccsgd", {"learning_rate": 0.1, "momentum": 0.9}, {}),
    ("test", "test", {"learning_rate": 0.1}, {"steps": 1}),  # ascends the loss: rounding grows geometrically
]
FLOAT64 = ("sgd", "adam", "nadam", "lamb", "lbsgd")  # not R.FLOAT32_STATES: those use test-only subclasses


@pytest.fixture(scope="module")
def torch_python():
    """The interpreter of ./.venv-torch, checked to have numpy >= 2 and no mxnet."""
    if not os.path.isfile(TORCH_PYTHON):
        message = f"{TORCH_PYTHON} is missing: build it with `bash scripts/setup_torch_env.sh`"
        if os.environ.get("GLUON_LR_REQUIRE_TORCH_ENV") == "1":
            pytest.fail(message)
        pytest.skip(message)
    code = ("import importlib.util, numpy; print(numpy.__version__, importlib.util.find_spec('mxnet') is None)")
    done = subprocess.run([TORCH_PYTHON, "-c", code], capture_output=True, text=True, timeout=60)
    version, no_mxnet = done.stdout.split()
    assert np.lib.NumpyVersion(version) >= "2.0.0" and no_mxnet == "True", done.stdout
    return TORCH_PYTHON


def _run(python, *args, timeout=600):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    return subprocess.run([python, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


def _worker(python, cases, job_path) -> dict:
    """Run ``tests.torch_side.worker`` on ``cases`` in a fresh ``python``; its one-line JSON summary."""
    with open(job_path, "w") as handle:
        json.dump(cases, handle)
    done = _run(python, "-m", "tests.torch_side.worker", str(job_path))
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_pip_install_keeps_numpy_and_torch(torch_python):
    """``pip install`` of the project (no extras) into the torch environment installs nothing but gluon-lr: its numpy
    2 and its torch stay."""
    done = _run(torch_python, "-m", "pip", "install", "--dry-run", "--quiet", "--no-build-isolation", "--report", "-",
                ".")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout[done.stdout.index("{"):])
    assert [item["metadata"]["name"] for item in report["install"]] == ["gluon-lr"]


def test_torch_side_tests_pass_without_mxnet(torch_python):
    """``pytest tests/torch_side`` passes in ./.venv-torch."""
    done = _run(torch_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/torch_side")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def _optimizer_case(folder, case, name, kwargs, options, dtype) -> dict:
    """STEPS LrTrainer steps of R's MLP, the files the torch side reads, and STEPS more MXNet steps."""
    steps = options.get("steps", STEPS)
    net = R.mx_net(dtype)
    if options.get("two_d_only"):
        for pname, param in net.collect_params().items():
            if pname.endswith("bias"):
                param.grad_req = "null"
    schedule = dict(R.SCHEDULE, step=2, base_lr=kwargs["learning_rate"])
    trainer = R.mx_trainer(net, name, dict(kwargs, wd=options.get("wd", 0.01), clip_gradient=0.5), schedule)
    data = R.batches(2 * steps, dtype)
    R.mx_train(net, trainer, data[:steps])
    os.makedirs(folder)
    trainer.export_settings(os.path.join(folder, "settings.json"))
    trainer.save_states(os.path.join(folder, "trainer.states"))
    gluon.Trainer.save_states(trainer, os.path.join(folder, "stock.states"))
    np.savez(os.path.join(folder, "middle.npz"), **R.weights_of(net))
    np.savez(os.path.join(folder, "data.npz"), **{f"{v}{i}": a for i, (x, y) in enumerate(data[steps:])
                                                  for v, a in (("x", x), ("y", y))})
    R.mx_train(net, trainer, data[steps:])
    return {"kind": "optimizer", "folder": folder, "dtype": dtype, "steps": steps, "case": case, "name": name,
            "final": R.weights_of(net), "noise": options.get("noise", False)}


@pytest.fixture(scope="module")
def optimizer_results(torch_python, tmp_path_factory):
    """Each case continued by the worker in ./.venv-torch and in ./.venv (fresh processes)."""
    root = tmp_path_factory.mktemp("optimizers")
    cases = [_optimizer_case(str(root / f"{case}-{dtype}"), case, name, kwargs, options, dtype)
             for case, name, kwargs, options in CASES for dtype in ("float32",) + (("float64",) * (case in FLOAT64))]
    jobs = [{k: v for k, v in c.items() if k != "final"} for c in cases]
    summaries = {}
    for tag, python in (("numpy2", torch_python), ("numpy1", sys.executable)):
        summaries[tag] = _worker(python, [dict(job, tag=tag) for job in jobs], root / f"job-{tag}.json")
    return cases, summaries


def test_optimizers_run_without_mxnet_on_numpy_2(optimizer_results):
    """The worker ran on numpy 2 in ./.venv-torch and on numpy 1.23 here; neither imported mxnet."""
    cases, summaries = optimizer_results
    assert np.lib.NumpyVersion(summaries["numpy2"]["numpy"]) >= "2.0.0"
    assert summaries["numpy1"]["numpy"] == np.__version__ == "1.23.5"
    assert {s["cases"] for s in summaries.values()} == {len(cases)} and len({c["name"] for c in cases}) == 19
    assert not summaries["numpy2"]["mxnet_imported"] and not summaries["numpy1"]["mxnet_imported"]


def test_every_exact_optimizer_is_bit_identical_on_numpy_2(optimizer_results):
    """For the 19 optimizers, the exact and the stock path's weights and the param groups' lrs are equal bit for bit
    on numpy 2 and numpy 1.23."""
    cases, _ = optimizer_results
    for case in cases:
        new, old = (np.load(os.path.join(case["folder"], f"result-{tag}.npz")) for tag in ("numpy2", "numpy1"))
        assert sorted(new.files) == sorted(old.files) and len(new.files) == (6 if case["case"] == "test" else 13)
        differ = [key for key in new.files if not np.array_equal(new[key], old[key])]
        assert not differ, f"{case['case']} {case['dtype']}: {differ} differ between numpy 2 and numpy 1.23"


def test_every_exact_optimizer_continues_mxnet_on_numpy_2(optimizer_results):
    """On numpy 2, the exact optimizers' weights after the torch steps are MXNet's within 1e-5 / 1e-12 (sgld draws
    torch's noise, not MXNet's: checked above for equality across environments only)."""
    cases, _ = optimizer_results
    for case in cases:
        if case["noise"]:
            continue
        result = np.load(os.path.join(case["folder"], "result-numpy2.npz"))
        worst = max((float(np.abs(result[f"exact/{name}"] - value).max()), name)
                    for name, value in case["final"].items())
        moved = max(float(np.abs(result[f"exact/{n}"] - np.load(os.path.join(case["folder"], "middle.npz"))[n]).max())
                    for n in case["final"])
        assert worst[0] <= TOLERANCE[case["dtype"]], f"{case['case']} {case['dtype']}: {worst[1]} off by {worst[0]}"
        assert moved > 1e-4, f"{case['case']}: the torch steps moved nothing"


class MxBnDepthwise(gluon.HybridBlock):
    """conv-BN-relu, a depthwise conv-BN-relu, global pool, dense (no conv bias: BatchNorm follows)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv = gluon.nn.Conv2D(8, 3, padding=1, use_bias=False, in_channels=3, prefix="conv_")
            self.bn = gluon.nn.BatchNorm(in_channels=8, prefix="bn_")
            self.dw = gluon.nn.Conv2D(8, 3, padding=1, groups=8, use_bias=False, in_channels=8, prefix="dw_")
            self.dw_bn = gluon.nn.BatchNorm(in_channels=8, prefix="dwbn_")
            self.head = gluon.nn.Dense(5, in_units=8, prefix="head_")

    def hybrid_forward(self, F, x):
        x = F.relu(self.dw_bn(self.dw(F.relu(self.bn(self.conv(x))))))
        return self.head(F.contrib.AdaptiveAvgPooling2D(x, output_size=1).flatten())


def _mx_steps(net, trainer, data):
    for x, y in data:
        with autograd.record():
            loss = ((net(mx.nd.array(x)) - mx.nd.array(y)) ** 2).sum()
        loss.backward()
        trainer.step(x.shape[0])


def bn_depthwise_trainer(net, optimizer: str, params: dict) -> tuple:
    """``(LrTrainer, mask)`` of the BatchNorm + depthwise net: head lr_mult 2, no wd on norms, the first conv frozen,
    the first 4 channels of the depthwise conv masked (``mask``, 1 = held)."""
    trainer = LrTrainer(net, optimizer, params, rules=[Rule("*head*", lr_mult=2.0), Rule("norm", wd_mult=0.0)])
    trainer.freeze("bndw_conv_weight")
    mask = np.zeros((8, 1, 3, 3), dtype=np.float32)
    mask[:4] = 1
    trainer.freeze("bndw_dw_weight", mask=mask)
    return trainer, mask


@pytest.fixture(scope="module")
def trained_bn_depthwise(tmp_path_factory):
    """STEPS LrTrainer steps (adam, head lr_mult 2, no wd on norms, the first conv frozen, a mask on the depthwise
    conv), the files, then STEPS more MXNet steps."""
    folder = tmp_path_factory.mktemp("bndw")
    mx.random.seed(0)
    net = MxBnDepthwise(prefix="bndw_")
    net.initialize(mx.init.Xavier())
    net.hybridize()
    # Adam turns the two frameworks' rounding of BatchNorm's gamma gradient (a sum that nearly cancels) into steps
    # proportional to lr: at lr 0.01 bn_gamma ends 2.2e-5 from MXNet's (the other tensors within 2e-7, and the
    # same on numpy 1.23), at lr 0.001 3.3e-6
    trainer, mask = bn_depthwise_trainer(net, "adam", {"learning_rate": 0.001, "wd": 1e-3})
    rng = np.random.RandomState(5)
    data = [(rng.randn(4, 3, 8, 8).astype("float32"), rng.randn(4, 5).astype("float32")) for _ in range(2 * STEPS)]
    _mx_steps(net, trainer, data[:STEPS])
    net.export(str(folder / "bndw"))
    trainer.export_settings(str(folder / "settings.json"))
    trainer.save_states(str(folder / "trainer.states"))
    middle = {name: p.data().asnumpy().copy() for name, p in net.collect_params().items()}
    np.savez(folder / "data.npz", **{f"{v}{i}": a for i, (x, y) in enumerate(data[STEPS:])
                                     for v, a in (("x", x), ("y", y))})
    _mx_steps(net, trainer, data[STEPS:])
    final = {name: p.data().asnumpy().copy() for name, p in net.collect_params().items()}
    return {"folder": folder, "middle": middle, "final": final, "mask": mask}


@pytest.mark.parametrize("model", ["twin", "generate"])
def test_migration_continues_on_numpy_2(torch_python, trained_bn_depthwise, model):
    """``migrate all`` here, ``load_migration`` + 4 torch steps in ./.venv-torch == MXNet's next 4 steps (1e-5);
    the frozen conv and the masked elements stay as they were, bit for bit; mxnet is not imported there."""
    folder, out = trained_bn_depthwise["folder"], trained_bn_depthwise["folder"] / f"out-{model}"
    torch_flag = "generate" if model == "generate" else "tests.torch_side.models:bn_depthwise_net"
    done = _run(sys.executable, "-m", "migrate", "all", "--symbol", str(folder / "bndw-symbol.json"),
                "--params", str(folder / "bndw-0000.params"), "--settings", str(folder / "settings.json"),
                "--states", str(folder / "trainer.states"), "--torch", torch_flag, "--input-shape", "1,3,8,8",
                "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    job = {"kind": "migration", "folder": str(out), "model": model, "class": "Bndw", "data": str(folder / "data.npz"),
           "steps": STEPS, "tag": "numpy2"}
    summary = _worker(torch_python, [job], out / "job.json")
    assert not summary["mxnet_imported"] and np.lib.NumpyVersion(summary["numpy"]) >= "2.0.0"
    result = np.load(out / "result-numpy2.npz")
    assert len(result.files) == len(trained_bn_depthwise["final"]) - 4  # running statistics are buffers
    for name in result.files:
        diff = float(np.abs(result[name] - trained_bn_depthwise["final"][name]).max())
        assert diff <= 1e-5, f"{model}: {name} differs from MXNet's by {diff:.3g}"
    middle = trained_bn_depthwise["middle"]
    assert np.array_equal(result["bndw_conv_weight"], middle["bndw_conv_weight"])
    masked = trained_bn_depthwise["mask"] == 1
    assert np.array_equal(result["bndw_dw_weight"][masked], middle["bndw_dw_weight"][masked])
    assert not np.array_equal(result["bndw_dw_weight"][~masked], middle["bndw_dw_weight"][~masked])
