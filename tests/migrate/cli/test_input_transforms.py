"""`migrate map` when one model scales its input before the first layer and the other does not (insightface's ArcFace
graph computes ``(data - 127.5) * 0.0078125`` before its first convolution; arcface_torch's iresnet does not): the
verification fails from the first layer on, and the report names the scaling as the likely cause; with the same
transform on both sides it passes and names nothing."""
import json
import re

import mxnet as mx
import pytest
import torch
from mxnet.gluon import nn

from migrate.cli import main

TORCH = "tests.migrate.cli.test_input_transforms:TorchScaled"
SHAPE = "1,3,6,6"


class MxScaled(nn.HybridBlock):
    """``(data - 127.5) * 0.0078125`` (``scaled``) -> conv -> BatchNorm -> relu -> dense."""

    def __init__(self, scaled=True, **kw):
        super().__init__(**kw)
        self.scaled = scaled
        with self.name_scope():
            self.conv = nn.Conv2D(4, 3, padding=1, in_channels=3)
            self.bn = nn.BatchNorm(in_channels=4)
            self.fc = nn.Dense(5, in_units=4 * 6 * 6)

    def hybrid_forward(self, F, x):
        if self.scaled:
            x = (x - 127.5) * 0.0078125
        return self.fc(F.relu(self.bn(self.conv(x))))


class TorchScaled(torch.nn.Module):
    """The twin of ``MxScaled``; it scales its input only when ``scaled``."""

    def __init__(self, scaled=False):
        super().__init__()
        self.scaled = scaled
        self.conv, self.bn = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(144, 5)

    def forward(self, x):
        if self.scaled:
            x = (x - 127.5) * 0.0078125
        return self.fc(torch.flatten(torch.relu(self.bn(self.conv(x))), 1))


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """The MXNet model exported with the scaling (scaled-*) and without (plain-*)."""
    folder = tmp_path_factory.mktemp("scaling")
    for name, scaled in (("scaled", True), ("plain", False)):
        mx.random.seed(0)
        net = MxScaled(scaled=scaled, prefix="sc_")
        net.initialize(mx.init.Xavier())
        net.hybridize()
        net(mx.nd.zeros((1, 3, 6, 6)))
        net.export(str(folder / name))
    return folder


# (description, MXNet export, torch scales, exit code, pattern of the cause or None)
CASES = [
    ("MXNet scales, torch does not", "scaled", False, 1,
     r"^input scaling in MXNet only: MXNet's graph computes \(data - 127.5\) \* 0.0078125 before 'sc_conv0_fwd' \(ops "
     r"sc__minusscalar0, sc__mulscalar0\), torch's 'conv' receives the input unchanged"),
    ("torch scales, MXNet does not", "plain", True, 1,
     r"^input scaling in torch only: torch's model transforms its input before 'conv' \(about x \* 0.0078125 \+ "
     r"-0.996094\), MXNet's 'sc_conv0_fwd' takes 'data' unchanged"),
    ("both scale", "scaled", True, 0, None),
]


@pytest.mark.parametrize("reader", ["mxnet", "files"])
@pytest.mark.parametrize("description, export, torch_scales, code, cause", CASES, ids=[c[0] for c in CASES])
def test_map_names_the_input_scaling(exports, tmp_path, capsys, monkeypatch, description, export, torch_scales, code,
                                     cause, reader):
    """`migrate map --json`, the files read by MXNet or without it: the exit code, and the first divergence's cause
    naming the transform and its ops (the text report shows it under the table); nothing named when both models
    transform alike."""
    if reader == "files":
        monkeypatch.setenv("MIGRATE_WITHOUT_MXNET", "1")
    argv = ["map", "--symbol", str(exports / f"{export}-symbol.json"), "--params",
            str(exports / f"{export}-0000.params"), "--torch", TORCH, "--kwargs", json.dumps({"scaled": torch_scales}), "--input-shape", SHAPE]
    assert main(argv + ["--out", str(tmp_path / "m.json"), "--json"]) == code, capsys.readouterr().err
    document = json.loads(capsys.readouterr().out)
    assert ("without MXNet" in document["mxnet_graph"]) == (reader == "files"), document["mxnet_graph"]
    first = document["verify"]["first_divergence"]
    if cause is None:
        assert first is None
        return
    assert (first["mxnet"], first["torch"]) == ("sc_conv0_fwd", "conv") and re.search(cause, first["cause"]), first
    assert main(argv + ["--out", str(tmp_path / "m2.json")]) == code
    assert f"  likely cause: {first['cause']}" in capsys.readouterr().out
