"""Every tutorial runs with its fast settings, and its real outputs hold what its story claims."""
import contextlib
import io
import json
import re

import mxnet as mx
import numpy as np
import pytest

from gluon_lr import load_settings
from tutorials import (demo, t01_finetune, t02_freezing, t03_layer_decay, t04_migrate, t05_module, t06_generate,
                       t09_distributed)

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
def demo_run(tmp_path_factory):
    """The main job (tutorials 1 and 4) run once with --fast; (output folder, stdout)."""
    folder = tmp_path_factory.mktemp("demo")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert demo.main(["--fast", "--out", str(folder)]) == 0
    return folder, out.getvalue()


@pytest.fixture(scope="module")
def t01_run(demo_run):
    """Tutorial 1's part of the demo run; (folder, stdout)."""
    return demo_run[0] / "t01", demo_run[1]


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


class TestT04Migrate:
    def test_migrate_report(self, demo_run):
        """`migrate all` exited 0 with every name mapped and verified; its report lies where the demo says."""
        folder, printed = demo_run
        report = json.loads((folder / "t04" / "migrated" / "report.json").read_text())
        assert (report["exit_code"], report["unmapped"]) == (0, {"mxnet": [], "torch": []}), report["status"]
        assert report["checks"] and all(report["checks"].values()), report["checks"]
        assert f"migrate report      {folder / 't04' / 'migrated' / 'report.txt'}" in printed
        assert (folder / "t04" / "migrated" / "report.txt").read_text().strip()

    def test_torch_groups(self, demo_run):
        """Six torch param groups: tutorial 1's three rates, each with and without weight decay."""
        groups = _summary(demo_run[0] / "t04")["torch_groups"]
        found = sorted((round(g["lr"], 9), round(g["weight_decay"], 9), g["tensors"]) for g in groups)
        assert found == [(0.0002, 0.0, 10), (0.0002, 0.0001, 5), (0.002, 0.0, 30), (0.002, 0.0001, 15),
                         (0.02, 0.0, 1), (0.02, 0.0001, 1)]

    def test_training_continues_in_torch(self, demo_run):
        """Torch's first step matches MXNet's next step to 1e-5 (exact migration); later steps drift by float32
        rounding only (measured: 4.5e-5 in the loss, 5.5e-4 in the weights after 2 steps)."""
        summary = _summary(demo_run[0] / "t04")
        steps = summary["steps"]
        assert len(summary["mxnet_losses"]) == 2 * steps and len(summary["torch_losses"]) == steps
        assert summary["first_step_gap"] <= 1e-5, summary["first_step_gap"]
        assert summary["loss_gap"] <= 1e-3, summary["loss_gap"]
        weights = summary["weights"]
        assert weights["tensors"] == 62 and weights["gap"] <= 5e-3, weights
        rows = (demo_run[0] / "t04" / "loss.csv").read_text().splitlines()
        assert rows[0] == "step,mxnet,mxnet_then_torch,mxnet_perturbed" and len(rows) == 1 + 2 * steps
        assert summary["control"]["loss_gap"] < 1e-2 and summary["control"]["weight_gap"] < 5e-3, summary["control"]

    def test_plot_written(self, demo_run):
        """loss.png is a real PNG image, and the demo says where it is."""
        folder, printed = demo_run
        png = (folder / "t04" / "loss.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
        assert f"loss plot           {folder / 't04' / 'loss.png'}" in printed

    def test_migrate_error_exit_code(self, tmp_path):
        """The migrate command on a folder without the MXNet files exits 2 and names the missing input."""
        done = t04_migrate.run_migrate(str(tmp_path / "nothing"), str(tmp_path / "out"))
        assert done.returncode == 2, done.stdout + done.stderr
        assert "nothing" in done.stdout + done.stderr


class TestT05Module:
    def test_outputs(self, tmp_path, capsys):
        """The second set_lr_mult drops the first (head weight measured at 1x, not 2x); the settings file holds
        what MXNet applies; migrate cuts the loss head and torch continues the Module within 1e-6."""
        assert t05_module.main(["--fast", "--out", str(tmp_path)]) == 0
        summary = _summary(tmp_path)
        assert summary["measured_lr"]["fc1_weight"] == pytest.approx(0.01, rel=REL)
        assert summary["measured_lr"]["fc2_weight"] == pytest.approx(0.1, rel=REL)  # asked: 0.2
        assert summary["asked_lr"]["fc2_weight"] == pytest.approx(0.2)
        assert {n: (p["lr_mult"], p["wd_mult"]) for n, p in summary["settings_params"].items()} == {
            "fc1_weight": (0.1, 1.0), "fc1_bias": (0.1, 0.0), "fc2_weight": (1.0, 1.0), "fc2_bias": (0.5, 0.0)}
        assert summary["note"] == ["note: Module checkpoint: loss head SoftmaxOutput 'softmax' and label input "
                                   "['softmax_label'] cut from the graph; matched up to ['fc2']"]
        assert summary["weight_gap"] <= 1e-6 and summary["loss_gap"] <= 1e-6, summary
        assert summary["module_losses"][0] > summary["module_losses"][-1]  # training moved
        assert "note: Module checkpoint" in (tmp_path / "migrated" / "report.txt").read_text()
        assert "fc2_weight  0.2 (first set_lr_mult)  0.1" in capsys.readouterr().out


ARG_ERRORS = [
    ("t01 zero steps", t01_finetune, ["--steps", "0"], r"--steps must be >= 1, got 0"),
    ("t02 negative steps", t02_freezing, ["--steps", "-1"], r"--steps must be >= 1, got -1"),
    ("t03 decay above 1", t03_layer_decay, ["--decay", "1.5"], r"--decay must be in \(0, 1\], got 1.5"),
    ("t03 steps not a number", t03_layer_decay, ["--steps", "many"], r"invalid int value: 'many'"),
    ("t04 zero steps", t04_migrate, ["--steps", "0"], r"--steps must be >= 1, got 0"),
    ("t05 zero steps", t05_module, ["--steps", "0"], r"--steps must be >= 1, got 0"),
    ("demo zero steps", demo, ["--steps", "0"], r"--steps must be >= 1, got 0"),
]


class TestArguments:
    @pytest.mark.parametrize("description, module, argv, pattern", ARG_ERRORS, ids=[e[0] for e in ARG_ERRORS])
    def test_bad_arguments(self, description, module, argv, pattern, capsys, tmp_path):
        """Bad command-line values stop with usage exit code 2 and a message naming the value."""
        with pytest.raises(SystemExit) as exc:
            module.main(argv + ["--out", str(tmp_path)])
        assert exc.value.code == 2
        assert re.search(pattern, capsys.readouterr().err), description


class TestT06Generate:
    def test_generated_model_trains_on(self, tmp_path, capsys):
        """--fast: model.py is written and shown; eval outputs within 1e-5 (relative) of MXNet's, the first torch
        loss within 1e-5 of MXNet's, weights within 1e-5 after the torch steps."""
        assert t06_generate.main(["--fast", "--out", str(tmp_path)]) == 0
        printed = capsys.readouterr().out
        summary = _summary(tmp_path)
        assert (tmp_path / "migrated" / "model.py").is_file() and "def forward(self, data):" in printed
        assert "--torch generate" in printed and summary["steps"] == 3
        assert summary["eval_output_rel_gap"] <= 1e-5, summary
        assert summary["first_loss_rel_gap"] <= 1e-5 and max(summary["loss_gaps"]) <= 1e-4, summary
        assert summary["weight_gap"] <= 1e-5 and summary["tensors"] == 27, summary


class TestT08Check:
    def test_wrong_twin_fixed_step_by_step(self, tmp_path, capsys):
        """--fast: the wrong twin's first divergence is the conv after the pooling (count_include_pad); with the
        pooling fixed, the first BatchNorm's running mean at step 1 (momentum read inverted); with both fixed only
        running variances differ (torch's unbiased update); each over 100x its control runs' difference (float32
        rounding); the generated module passes every tensor (exit 0)."""
        from tutorials import t08_check
        assert t08_check.main(["--fast", "--out", str(tmp_path)]) == 0
        runs = _summary(tmp_path)["runs"]
        assert [r["exit_code"] for r in runs] == [1, 1, 1, 0]
        firsts = [r["first_divergence"] for r in runs[:3]]
        assert [(f["kind"], f["name"], f["step"]) for f in firsts] == [
            ("forward", "small_conv1_fwd", 1), ("running statistic", "small_batchnorm0_running_mean", 1),
            ("running statistic", "small_batchnorm0_running_var", 1)]
        assert [f["cause"].split(":")[0] for f in firsts] == ["average pooling over padding",
                                                              "BatchNorm momentum read inverted",
                                                              "unbiased running variance"]
        assert all(f["max_abs_diff"] > 100 * f["control"] for f in firsts), firsts  # far above float32 rounding
        assert runs[1]["diverged_kinds"] == runs[2]["diverged_kinds"] == ["running statistic"]
        assert runs[3]["diverged"] == 0 and runs[3]["compared"] == runs[0]["compared"] == 55
        printed = capsys.readouterr().out
        assert "--kwargs '{\"momentum\": 0.9, \"count_include_pad\": false}'" in printed
        assert (tmp_path / "check-1.txt").read_text().count("DIVERGES") == runs[0]["diverged"]


class TestT09Distributed:
    def test_two_devices_continue_on_two_ranks(self, tmp_path, capsys):
        """--fast: MXNet's 2-device run continues on 2 gloo ranks with FSDP2 (each rank holding half the parameters,
        gradient scale MXNet's 1/8 times 2): losses within 1e-5 of MXNet's, weights within 1e-5 after the torch steps,
        no DeviceCountWarning."""
        assert t09_distributed.main(["--fast", "--out", str(tmp_path)]) == 0
        printed = capsys.readouterr().out
        summary = _summary(tmp_path)
        assert "fully_shard(model)" in printed and "gradient scale 0.25" in printed and summary["steps"] == 2
        assert summary["held_per_rank"] == [846, 846] and not summary["warned"], summary
        assert max(summary["loss_gaps"]) <= 1e-5 and summary["weight_gap"] <= 1e-5 and summary["tensors"] == 21, summary
