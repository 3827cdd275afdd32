"""tutorials/demo.py: the README's main job runs and writes outputs that load back."""
import mxnet as mx

from gluon_lr import LrTrainer, load_settings
from tutorials import demo


class TestDemo:
    def test_short_run_writes_outputs(self, tmp_path, capsys):
        """Two steps print the explanation, and the settings and states files load back."""
        assert demo.main(["--steps", "2", "--out", str(tmp_path)]) == 0
        printed = capsys.readouterr().out
        assert "resnetv10_dense0_weight" in printed and "rules[1] 'resnetv10_dense0_*'" in printed
        settings = load_settings(tmp_path / "settings.json")
        assert settings["num_update"] == 2 and settings["optimizer"]["rescale_grad"] == 1 / demo.BATCH
        assert settings["params"]["resnetv10_dense0_weight"]["lr_mult"] == 1.0
        assert settings["params"]["resnetv10_conv0_weight"]["lr_mult"] == 0.1
        assert settings["params"]["resnetv10_batchnorm0_gamma"]["wd_mult"] == 0.0
        losses = [float(line.split(",")[1]) for line in (tmp_path / "loss.csv").read_text().splitlines()[1:]]
        assert len(losses) == 2 and all(0 < loss < 10 for loss in losses)
        net = mx.gluon.model_zoo.vision.resnet18_v1(classes=demo.CLASSES, prefix="resnetv10_")
        net.load_parameters(str(tmp_path / "model.params"))
        trainer = LrTrainer(net, "sgd", {"learning_rate": 0.02, "momentum": 0.9})
        assert trainer.load_states(tmp_path / "trainer.states") == []
        assert trainer.lr_mult["resnetv10_conv0_weight"] == 0.1
