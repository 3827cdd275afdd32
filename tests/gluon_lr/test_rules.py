"""Rules: selection by glob, regex and layer kind; merging of params; the resolution order."""
import pytest

from gluon_lr import LrTrainer, Rule
from gluon_lr.rules import collect_params, match_rules
from tests.gluon_lr.conftest import build_kinds_net, build_mlp


def _selected(params, rule):
    """Names one rule selects among ``params``."""
    _, kinds = collect_params(params)
    return set(match_rules([rule], kinds)[0])


class TestRule:
    def test_multipliers_become_floats(self):
        """Integer multipliers are stored as floats; the dataclass is frozen."""
        rule = Rule("*", lr_mult=1, wd_mult=0)
        assert (rule.lr_mult, rule.wd_mult) == (1.0, 0.0) and isinstance(rule.lr_mult, float)
        with pytest.raises(AttributeError):
            rule.lr_mult = 2.0


class TestSelection:
    def test_glob_matches_whole_name(self):
        """A glob matches the whole name, never a substring."""
        assert _selected(build_mlp(), Rule("mlp_dense*_bias", wd_mult=0)) == {"mlp_dense0_bias", "mlp_dense1_bias"}
        assert _selected(build_mlp(), Rule("*dense0*", lr_mult=0)) == {"mlp_dense0_weight", "mlp_dense0_bias"}

    def test_regex_fullmatch(self):
        """'re:' patterns use re.fullmatch."""
        assert _selected(build_mlp(), Rule(r"re:mlp_dense[01]_weight", lr_mult=2)) == {"mlp_dense0_weight",
                                                                                       "mlp_dense1_weight"}
        assert _selected(build_mlp(), Rule(r"re:.*_(gamma|beta)", lr_mult=2)) == {"mlp_batchnorm0_gamma",
                                                                                  "mlp_batchnorm0_beta"}

    @pytest.mark.parametrize("kind,expected", [
        ("bias", {"k_conv0_bias", "k_conv1_bias", "k_dense0_bias"}),
        ("norm", {f"k_{b}_{p}" for b, p in [("batchnorm0", "gamma"), ("batchnorm0", "beta"),
                                            ("batchnorm0", "running_mean"), ("batchnorm0", "running_var"),
                                            ("layernorm0", "gamma"), ("layernorm0", "beta"),
                                            ("instancenorm0", "gamma"), ("instancenorm0", "beta"),
                                            ("groupnorm0", "gamma"), ("groupnorm0", "beta")]}),
        ("embedding", {"k_embedding0_weight"}),
        ("depthwise", {"k_conv1_weight", "k_conv1_bias"}),
    ])
    def test_kind_from_block(self, kind, expected):
        """Given the Block, kinds come from the layer types (Conv with groups == channels is depthwise)."""
        assert _selected(build_kinds_net(), Rule(kind, lr_mult=0.5)) == expected

    def test_kind_fallback_on_names(self):
        """Given only a ParameterDict, 'bias' and 'norm' follow the name conventions."""
        params = build_mlp().collect_params()
        assert _selected(params, Rule("bias", wd_mult=0)) == {"mlp_dense0_bias", "mlp_dense1_bias"}
        assert _selected(params, Rule("norm", wd_mult=0)) == {f"mlp_batchnorm0_{s}" for s in
                                                             ("gamma", "beta", "running_mean", "running_var")}


class TestCollectParams:
    def test_merges_list_of_dicts(self):
        """A list of ParameterDicts (one reached twice) merges in list order, each dict sorted by name."""
        net = build_mlp()
        params, _ = collect_params([net[2].collect_params(), net[0].collect_params(), net[0].collect_params()])
        assert [p.name for p in params] == ["mlp_dense1_bias", "mlp_dense1_weight", "mlp_dense0_bias",
                                            "mlp_dense0_weight"]

    def test_list_of_parameters_keeps_order(self):
        """A list of Parameters keeps the given order (as gluon.Trainer does)."""
        ps = build_mlp().collect_params()
        order = ["mlp_dense1_weight", "mlp_dense0_weight"]
        params, _ = collect_params([ps[n] for n in order])
        assert [p.name for p in params] == order

    def test_block_and_dict_mix(self):
        """Blocks and ParameterDicts mix; a parameter met through its Block keeps its Block kinds."""
        net, other = build_kinds_net(), build_mlp(prefix="x_")
        params, kinds = collect_params([other.collect_params(), net])
        assert len(params) == len(list(net.collect_params().keys())) + 8
        assert kinds["k_conv1_weight"].kinds == {"depthwise"} and not kinds["x_dense0_bias"].from_block


class TestMergedTrainer:
    def test_rules_over_merged_params(self):
        """Rules resolve over backbone + head merged from two Blocks; the table maps every name."""
        backbone, head = build_mlp(prefix="bb_"), build_mlp(prefix="hd_")
        trainer = LrTrainer([backbone, head.collect_params()], "sgd",
                            rules=[Rule("bb_*", lr_mult=0.1), Rule("bias", wd_mult=0.0)])
        assert trainer.lr_mult["bb_dense0_weight"] == 0.1 and trainer.lr_mult["hd_dense0_weight"] == 1.0
        assert trainer.wd_mult["hd_dense1_bias"] == 0.0 and trainer.wd_mult["bb_dense1_weight"] == 1.0
        assert len(trainer.lr_mult) == 16
