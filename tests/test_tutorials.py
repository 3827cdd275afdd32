"""Every tutorial runs with its fast settings, and its real outputs hold what its story claims."""
import contextlib
import io
import json
import re

import mxnet as mx
import numpy as np
import pytest

from gluon_lr import load_settings
from tutorials import t01_finetune, t02_freezing, t03_layer_decay

REL = 1e-3  # measured first-step learning rates (float32 least squares) within this relative error


def _summary(folder) -> dict:
    """The tutorial's summary.json."""
    return json.loads((folder / "summary.json").read_text())


def _assert_rates(rows: list, what: str) -> None:
    """Each row's measured range lies within REL of its configured effective rate; failure names the worst row."""
    worst = max(rows, key=lambda r: max(abs(r["measured_min"] / r["effective_lr"] - 1),
                                        abs(r["measured_max"] / r["effective_lr"] - 1)))
    error = max(abs(worst["measured_min"] / worst["effective_lr"] - 1),
                abs(worst["measured_max"] / worst["effective_lr"] - 1))
    assert error <= REL, f"{what}: {worst} measured off its effective rate by {error:.3g} (rel) > {REL}"


@pytest.fixture(scope="module")
def t01_run(tmp_path_factory):
    """Tutorial 1 run once with --fast; (folder, stdout)."""
    folder = tmp_path_factory.mktemp("t01")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert t01_finetune.main(["--fast", "--out", str(folder)]) == 0
    return folder, out.getvalue()


class TestT01Finetune:
    def test_pitfall_measured(self, t01_run):
        """Stock optimizer: the first set_lr_mult call is lost (full rate 0.1); LrTrainer keeps both (0.01)."""
        folder, printed = t01_run
        pitfall = _summary(folder)["pitfall"]
        assert pitfall["stock"]["a"] == pytest.approx(0.1, abs=1e-7)
        assert pitfall["stock"]["b"] == pytest.approx(0.01, abs=1e-7)
        assert pitfall["LrTrainer"] == pytest.approx({"a": 0.01, "b": 0.01}, abs=1e-7)
        assert "NO: the first call was lost" in printed

    def test_group_rates_measured(self, t01_run):
        """Three groups (early layers 0.1 by rule, backbone 1 and head 10 by Parameter.lr_mult), measured on step 1."""
        folder, printed = t01_run
        rows = _summary(folder)["groups"]
        assert [(r["lr_mult"], r["params"]) for r in rows] == [(0.1, 15), (1.0, 45), (10.0, 2)]
        assert [r["source"] for r in rows] == ["rules[0] 're:resnetv10_(conv0|batchnorm0|stage1)_.*'", "param",
                                               "param"]
        _assert_rates(rows, "t01 groups")
        assert f"trained on {mx.cpu() if mx.context.num_gpus() == 0 else mx.gpu(0)}" in printed

    def test_explain_and_settings(self, t01_run):
        """explain.txt has all 102 rows; settings.json carries the resolved table after 3 updates."""
        folder, printed = t01_run
        explain = (folder / "explain.txt").read_text().splitlines()
        assert len(explain) == 2 + 102 and "rules[2] 'bias'" in printed
        settings = load_settings(folder / "settings.json")
        assert settings["num_update"] == 3 and settings["optimizer"]["rescale_grad"] == 1 / t01_finetune.BATCH
        params = settings["params"]
        assert (params["resnetv10_dense0_weight"]["lr_mult"], params["resnetv10_conv0_weight"]["lr_mult"],
                params["resnetv10_stage2_conv0_weight"]["lr_mult"]) == (10.0, 0.1, 1.0)
        assert params["resnetv10_batchnorm0_gamma"]["wd_mult"] == 0.0 and params["resnetv10_dense0_bias"]["wd_mult"] == 0

    def test_weights_and_loss(self, t01_run):
        """model.params loads into a fresh network and differs from the initial weights; losses are finite."""
        folder, _ = t01_run
        net, fresh = t01_finetune.build_net(), t01_finetune.build_net()
        net.load_parameters(str(folder / "model.params"))
        moved = np.abs(net.output.weight.data().asnumpy() - fresh.output.weight.data().asnumpy()).max()
        assert moved > 1e-4, f"the head did not train: max |dW| {moved:.3g}"
        losses = [float(line.split(",")[1]) for line in (folder / "loss.csv").read_text().splitlines()[1:]]
        assert len(losses) == 3 and all(0 < loss < 10 for loss in losses), losses


class TestT02Freezing:
    def test_outputs(self, tmp_path, capsys):
        """Zero gradient and lr_mult=0 move the layer, freeze holds it; masks hold; unfreezing goes head first."""
        assert t02_freezing.main(["--fast", "--out", str(tmp_path)]) == 0
        summary = _summary(tmp_path)
        moved = {r["how"]: r["moved"] for r in summary["freeze"]}
        assert moved["zero gradient (stop_gradient)"] > 1e-4 and moved["lr_mult = 0"] > 1e-4, moved
        assert moved["LrTrainer.freeze"] == 0.0, moved
        stock, masked = summary["mask"]
        assert stock["masked_moved"] > 0.4 * stock["masked_total"] and masked["masked_moved"] == 0, summary["mask"]
        assert masked["free_moved"] > 0 and masked["masked_total"] == stock["masked_total"]
        groups = len(summary["groups"])
        for row in summary["unfreezing"]:
            frozen = groups - row["trainable"]
            assert row["trainable"] == row["epoch"] + 1
            assert all(m == 0 for m in row["moved"][:frozen]), row
            assert all(m > 1e-4 for m in row["moved"][frozen:]), row
        assert "held elements that moved" in capsys.readouterr().out and (tmp_path / "freezing.txt").exists()


class TestT03LayerDecay:
    def test_outputs(self, tmp_path, capsys):
        """Ten depths with multipliers 0.75 ** (9 - depth), measured on the first step; explain shows depths."""
        assert t03_layer_decay.main(["--fast", "--out", str(tmp_path)]) == 0
        rows = _summary(tmp_path)["rows"]
        assert [r["depth"] for r in rows] == list(range(10))
        assert [r["lr_mult"] for r in rows] == pytest.approx([0.75 ** (9 - d) for d in range(10)], rel=1e-12)
        assert rows[0]["layer"] == "features.0+features.1" and rows[-1]["layer"] == "output"
        _assert_rates(rows, "t03 decay")
        explain = (tmp_path / "explain.txt").read_text()
        assert "rules[0] depth 0 [features.0+features.1]" in explain and "rules[9] depth 9 [output]" in explain
        assert "measured on step 1" in capsys.readouterr().out


ARG_ERRORS = [
    ("t01 zero steps", t01_finetune, ["--steps", "0"], r"--steps must be >= 1, got 0"),
    ("t02 negative steps", t02_freezing, ["--steps", "-1"], r"--steps must be >= 1, got -1"),
    ("t03 decay above 1", t03_layer_decay, ["--decay", "1.5"], r"--decay in \(0, 1\], got 10 and 1.5"),
    ("t03 steps not a number", t03_layer_decay, ["--steps", "many"], r"invalid int value: 'many'"),
]


class TestArguments:
    @pytest.mark.parametrize("description, module, argv, pattern", ARG_ERRORS, ids=[e[0] for e in ARG_ERRORS])
    def test_bad_arguments(self, description, module, argv, pattern, capsys, tmp_path):
        """Bad command-line values stop with usage exit code 2 and a message naming the value."""
        with pytest.raises(SystemExit) as exc:
            module.main(argv + ["--out", str(tmp_path)])
        assert exc.value.code == 2
        assert re.search(pattern, capsys.readouterr().err), description
