"""An ArcFace ResNet written in insightface's MXNet symbol style, trained as a Module, through ``python -m migrate all
--torch generate``, continued in torch.

The builder is ours, in the structure of insightface's ``fresnet.py`` (unit v3, the "fc1" embedding head) at a tiny
size: the input scaled from pixel values, PReLU activations (``LeakyReLU(act_type='prelu')``) everywhere, BatchNorm
with ``fix_gamma=False`` in the body and ``fix_gamma=True`` on the embedding, strided shortcut convolutions, and the
softmax training head (``fc7`` with its bias at lr_mult 2, wd_mult 0, then ``SoftmaxOutput``).
"""
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import torch

import migrate
from migrate.cli.commands import main as migrate_main
from tests.migrate.generate.test_generate import generate_module
from tests.migrate.mapping.test_module_batchnorm import (assert_close, bound_module, checkpoint, module_arrays, module_steps,
                                                 torch_steps)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
STEPS, SHAPE, CLASSES = 2, (4, 3, 16, 16), 5
RS = np.random.RandomState(7)
DATA = RS.uniform(0, 255, (2 * STEPS, *SHAPE)).astype("float32")  # pixel values: the symbol scales them
LABELS = RS.randint(0, CLASSES, (2 * STEPS, SHAPE[0])).astype("float32")


def _conv(data, num_filter, kernel, stride, name):
    pad = tuple(k // 2 for k in kernel)
    return mx.sym.Convolution(data=data, num_filter=num_filter, kernel=kernel, stride=stride, pad=pad, no_bias=True,
                              name=name)


def _bn(data, name, fix_gamma=False):
    return mx.sym.BatchNorm(data=data, fix_gamma=fix_gamma, eps=2e-5, momentum=0.9, name=name)


def _prelu(data, name):
    return mx.sym.LeakyReLU(data=data, act_type="prelu", name=name)


def residual_unit(data, num_filter, stride, dim_match, name):
    """insightface's unit v3: BN -> conv 3x3 -> BN -> PReLU -> conv 3x3 (strided) -> BN, plus the input, or a strided
    1x1 conv and BN of it where the shape changes."""
    body = _conv(_bn(data, f"{name}_bn1"), num_filter, (3, 3), (1, 1), f"{name}_conv1")
    body = _prelu(_bn(body, f"{name}_bn2"), f"{name}_relu1")
    body = _bn(_conv(body, num_filter, (3, 3), stride, f"{name}_conv2"), f"{name}_bn3")
    if dim_match:
        return body + data
    return body + _bn(_conv(data, num_filter, (1, 1), stride, f"{name}_conv1sc"), f"{name}_sc")


def arcface_symbol(filters=(8, 8, 16), units=(1, 2), embedding=8, classes=CLASSES):
    """Input scaling, conv0 -> bn0 -> PReLU relu0, one stage per unit count (the first unit strided), the "fc1"
    embedding (BN -> FullyConnected pre_fc1 -> BN fc1 with fix_gamma=True), fc7 and SoftmaxOutput."""
    body = (mx.sym.identity(mx.sym.Variable("data"), name="id") - 127.5) * 0.0078125
    body = _prelu(_bn(_conv(body, filters[0], (3, 3), (1, 1), "conv0"), "bn0"), "relu0")
    for stage, (count, num_filter) in enumerate(zip(units, filters[1:]), start=1):
        for unit in range(1, count + 1):
            body = residual_unit(body, num_filter, (2, 2) if unit == 1 else (1, 1), unit > 1,
                                 f"stage{stage}_unit{unit}")
    fc1 = mx.sym.FullyConnected(_bn(body, "bn1"), num_hidden=embedding, name="pre_fc1")
    fc1 = _bn(fc1, "fc1", fix_gamma=True)
    bias = mx.sym.Variable("fc7_bias", lr_mult=2.0, wd_mult=0.0)
    fc7 = mx.sym.FullyConnected(fc1, weight=mx.sym.Variable("fc7_weight"), bias=bias, num_hidden=classes, name="fc7")
    return mx.sym.SoftmaxOutput(fc7, name="softmax")


class TorchUnit(torch.nn.Module):
    """``residual_unit`` in torch: BatchNorm2d with MXNet's eps, per-channel PReLU."""

    def __init__(self, cin, cout, stride, dim_match):
        super().__init__()
        self.bn1, self.bn2, self.bn3 = (torch.nn.BatchNorm2d(c, eps=2e-5) for c in (cin, cout, cout))
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, 1, 1, bias=False)
        self.relu1 = torch.nn.PReLU(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, stride, 1, bias=False)
        self.shortcut = None if dim_match else torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                                   torch.nn.BatchNorm2d(cout, eps=2e-5))

    def forward(self, x):
        body = self.bn3(self.conv2(self.relu1(self.bn2(self.conv1(self.bn1(x))))))
        return body + (x if self.shortcut is None else self.shortcut(x))


class TorchArcFace(torch.nn.Module):
    """The torch twin of ``arcface_symbol()`` as a PyTorch port writes it (the embedding's BatchNorm1d is trainable
    here: migrate holds its scale at 1, as MXNet's fix_gamma=True does)."""

    def __init__(self):
        super().__init__()
        self.conv0 = torch.nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn0, self.relu0 = torch.nn.BatchNorm2d(8, eps=2e-5), torch.nn.PReLU(8)
        self.units = torch.nn.Sequential(TorchUnit(8, 8, 2, False), TorchUnit(8, 16, 2, False),
                                         TorchUnit(16, 16, 1, True))
        self.bn1 = torch.nn.BatchNorm2d(16, eps=2e-5)
        self.pre_fc1, self.fc1 = torch.nn.Linear(16 * 4 * 4, 8), torch.nn.BatchNorm1d(8, eps=2e-5)
        self.fc7 = torch.nn.Linear(8, CLASSES)

    def forward(self, x):
        x = self.units(self.relu0(self.bn0(self.conv0((x - 127.5) * 0.0078125))))
        return self.fc7(self.fc1(self.pre_fc1(self.bn1(x).flatten(1))))


def trained_arcface(tmp_path) -> tuple:
    """The Module trained STEPS steps and checkpointed, then STEPS more: (files, arrays after 2*STEPS)."""
    mod = bound_module(arcface_symbol(), SHAPE, "sgd", {"momentum": 0.9})
    module_steps(mod, DATA, LABELS, range(STEPS))
    files = checkpoint(mod, tmp_path, "arcface")
    module_steps(mod, DATA, LABELS, range(STEPS, 2 * STEPS))
    return files, module_arrays(mod)


def test_arcface_twin_continues_in_torch(tmp_path):
    """`migrate all` with a PyTorch port (nn.PReLU per channel, BatchNorm1d embedding): every slope pairs with its
    nn.PReLU, fc1's scale is held at 1; STEPS torch steps equal the Module's next STEPS (1e-5; the running variances
    aside: torch's BatchNorm adds the unbiased batch variance)."""
    files, final = trained_arcface(tmp_path)
    out = tmp_path / "migrated"
    code = migrate_main(["all", "--symbol", str(files["symbol"]), "--params", str(files["params"]), "--settings",
                         str(files["settings"]), "--states", str(files["states"]), "--torch",
                         "tests.migrate.mapping.test_arcface:TorchArcFace", "--input-shape", ",".join(map(str, SHAPE)),
                         "--out", str(out)])
    assert code == 0
    mapping = migrate.NameMapping.load(out / "mapping.json")
    assert mapping["relu0_gamma"] == "relu0.weight" and mapping["stage2_unit2_relu1_gamma"] == "units.2.relu1.weight"
    assert mapping["stage1_unit1_sc_gamma"] == "units.0.shortcut.1.weight" and mapping.held == {"fc1_gamma": 1.0}
    model = TorchArcFace()
    optimizer, scheduler = migrate.load_migration(out, model)
    torch_steps(model, optimizer, DATA, LABELS, range(STEPS, 2 * STEPS), scheduler)
    assert_close({name: value for name, value in final.items() if name != "fc1_gamma"
                  and not name.endswith("_moving_var")}, model, mapping)
    assert torch.equal(model.fc1.weight, torch.ones(8)) and not model.fc1.weight.requires_grad


def test_arcface_migrates_and_continues_in_torch(tmp_path):
    """`python -m migrate all --torch generate` on the checkpoint after STEPS Module steps: exit 0, every PReLU slope
    mapped, fc1's scale held at 1, verified; STEPS torch steps equal the Module's next STEPS (1e-5, running
    statistics included)."""
    files, final = trained_arcface(tmp_path)
    out = tmp_path / "migrated"
    command = [sys.executable, "-m", "migrate", "all", "--symbol", str(files["symbol"]), "--params",
               str(files["params"]), "--settings", str(files["settings"]), "--states", str(files["states"]),
               "--torch", "generate", "--input-shape", ",".join(map(str, SHAPE)), "--out", str(out)]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = (out / "report.txt").read_text()
    assert "equivalent: yes  verified: yes" in report and "fc1.gamma (held at 1: MXNet fix_gamma=True)" in report
    mapping = migrate.NameMapping.load(out / "mapping.json")
    slopes = sorted(name for name in files["saved"] if "relu" in name)
    assert len(slopes) == 4 and all(name in mapping for name in slopes) and mapping.held == {"fc1_gamma": 1.0}
    assert mapping.ok and len(mapping) == len(files["saved"])
    model = generate_module(out / "model.py").Arcface()
    optimizer, scheduler = migrate.load_migration(out, model)
    torch_steps(model, optimizer, DATA, LABELS, range(STEPS, 2 * STEPS), scheduler)
    assert_close({name: value for name, value in final.items() if name != "fc1_gamma"}, model, mapping)
    assert torch.equal(model.state_dict()[mapping["fc1_gamma"]], torch.ones(8))
    moved = max(float(np.abs(final[name] - files["saved"][name]).max()) for name in slopes)
    assert moved > 1e-4  # the slopes trained over the compared steps
