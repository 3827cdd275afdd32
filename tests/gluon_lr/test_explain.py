"""explain(): one row per parameter with values, their sources and the shadowed rules."""
from gluon_lr import LrTrainer, Rule
from tests.gluon_lr.conftest import build_mlp


def _trainer():
    trainer = LrTrainer(build_mlp(), "sgd", rules=[Rule("*", lr_mult=0.1), Rule("mlp_dense1_*", lr_mult=1.0),
                                                   Rule("bias", wd_mult=0.0)])
    trainer.set_lr_mult({"mlp_dense1_bias": 5.0})
    return trainer


class TestExplain:
    def test_rows_sources_and_shadowed(self):
        """Each row names the rule or call that set each value and the rules it overrode."""
        data = _trainer().explain().to_dict()
        assert list(data) == sorted(data) and len(data) == 8
        assert data["mlp_dense1_weight"]["lr_mult"] == 1.0
        assert data["mlp_dense1_weight"]["lr_source"] == "rules[1] 'mlp_dense1_*'"
        assert data["mlp_dense1_weight"]["shadowed"] == ["rules[0] '*' (lr_mult=0.1)"]
        bias = data["mlp_dense1_bias"]
        assert (bias["lr_mult"], bias["lr_source"], bias["wd_mult"], bias["wd_source"]) == (5.0, "set_lr_mult", 0.0,
                                                                                           "rules[2] 'bias'")
        assert bias["shadowed"] == ["rules[0] '*' (lr_mult=0.1)", "rules[1] 'mlp_dense1_*' (lr_mult=1)"]
        assert data["mlp_dense0_weight"]["shape"] == [4, 3] and data["mlp_dense0_weight"]["wd_source"] == "param"

    def test_table_text(self):
        """Printing gives a header, a rule line and one aligned line per parameter."""
        explanation = _trainer().explain()
        lines = str(explanation).splitlines()
        assert lines[0].split() == ["name", "shape", "lr_mult", "lr", "from", "wd_mult", "wd", "from", "shadowed",
                                     "update", "frozen", "masked", "depth"]
        assert len(lines) == 2 + len(explanation)
        row = next(line for line in lines if line.startswith("mlp_dense0_weight"))
        assert "4x3" in row and "0.1" in row and "rules[0] '*'" in row
        assert len({line.index("lr_mult") if i == 0 else None for i, line in enumerate(lines)}) == 2
