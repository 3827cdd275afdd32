"""Tests of migrate.param_groups: membership by id(param), absolute lr/wd, freezing, unmapped parameters."""
import pytest
import torch

import migrate
from migrate.errors import MappingError, SettingsError
from tests.migrate import _mx_reference as R


def _setup(lr=0.1, wd=0.01):
    net = R.mx_net("float32")
    settings = R.settings_of(net, "sgd", {"learning_rate": lr, "wd": wd, "momentum": 0.9}, None)
    return R.torch_net(net), settings


class TestParamGroups:
    def test_membership_by_id(self):
        """Each torch parameter is in exactly the group its lr_mult/wd_mult/frozen call for (frozen: lr = wd = 0)."""
        model, settings = _setup()
        groups = migrate.param_groups(model, settings, R.MAPPING)
        where = {}
        for group in groups:
            for param in group["params"]:
                assert id(param) not in where, "a parameter is in two groups"
                where[id(param)] = (group["lr"], group["weight_decay"])
        p = model.get_parameter
        assert where == {
            id(p("0.weight")): (pytest.approx(0.05), pytest.approx(0.01)),
            id(p("0.bias")): (pytest.approx(0.05), 0.0),
            id(p("4.weight")): (pytest.approx(0.2), pytest.approx(0.02)),
            id(p("4.bias")): (pytest.approx(0.2), 0.0),
            id(p("2.weight")): (0.0, 0.0),
            id(p("2.bias")): (0.0, 0.0),
        }

    def test_frozen_parameters_in_frozen_groups(self):
        """The frozen layer is in a group with frozen=True (its state can be kept) and listed in .frozen; the model
        changes only on apply_frozen."""
        model, settings = _setup()
        groups = migrate.param_groups(model, settings, R.MAPPING)
        in_frozen = {id(p) for g in groups if g["frozen"] for p in g["params"]}
        assert sorted(groups.frozen) == ["2.bias", "2.weight"]
        for key in ("2.weight", "2.bias"):
            param = model.get_parameter(key)
            assert param.requires_grad and id(param) in in_frozen
        groups.apply_frozen(model)
        assert [k for k, p in model.named_parameters() if not p.requires_grad] == ["2.weight", "2.bias"]

    def test_deterministic_order_and_metadata(self):
        """Groups follow MXNet's index order and carry lr_mult, wd_mult, mx_names and mx_indices."""
        model, settings = _setup()
        groups = migrate.param_groups(model, settings, R.MAPPING)
        assert [g["mx_names"] for g in groups] == [["mlp_fc0_bias"], ["mlp_fc0_weight"], ["mlp_fc1_bias",
                                                   "mlp_fc1_weight"], ["mlp_fc2_bias"], ["mlp_fc2_weight"]]
        assert [g["mx_indices"] for g in groups] == [[0], [1], [2, 3], [4], [5]]
        assert [(g["lr_mult"], g["wd_mult"], g["frozen"]) for g in groups] == [
            (0.5, 0.0, False), (0.5, 1.0, False), (1.0, 1.0, True), (2.0, 0.0, False), (2.0, 2.0, False)]

    def test_zero_weight_decay_keeps_wd_mult_apart(self):
        """With wd=0 a weight (wd_mult 1) and a bias (wd_mult 0) still get their own groups, each labelled with its
        own wd_mult: groups are keyed by (lr, weight_decay, lr_mult, wd_mult, frozen)."""
        model, settings = _setup(wd=0.0)
        groups = [g for g in migrate.param_groups(model, settings, R.MAPPING) if not g["frozen"]]
        assert [(g["mx_names"], g["wd_mult"], g["weight_decay"]) for g in groups] == [
            (["mlp_fc0_bias"], 0.0, 0.0), (["mlp_fc0_weight"], 1.0, 0.0), (["mlp_fc2_bias"], 0.0, 0.0),
            (["mlp_fc2_weight"], 2.0, 0.0)]

    def test_groups_work_with_stock_torch(self):
        """The groups feed torch.optim.SGD; one step moves the trained head and leaves the frozen layer (lr 0 in its
        group, even without apply_frozen)."""
        model, settings = _setup()
        before = {k: v.detach().clone() for k, v in model.named_parameters()}
        optimizer = torch.optim.SGD(migrate.param_groups(model, settings, R.MAPPING), lr=1.0)
        model(torch.ones(2, R.SIZES[0])).sum().backward()
        optimizer.step()
        assert float((model.get_parameter("4.weight").detach() - before["4.weight"]).abs().max()) > 1e-4
        assert torch.equal(model.get_parameter("2.weight"), before["2.weight"])

    def test_unmapped_policies(self):
        """A torch parameter without MXNet source raises, is frozen, or trains with lr_mult 1, as asked."""
        mapping = {k: v for k, v in R.MAPPING.items() if k != "mlp_fc2_bias"}
        model, settings = _setup()
        with pytest.raises(MappingError, match=r"\['4.bias'\].*unmapped='freeze'"):
            migrate.param_groups(model, settings, mapping)
        with pytest.warns(UserWarning, match="4.bias"):
            frozen = migrate.param_groups(model, settings, mapping, unmapped="freeze").frozen
        assert "4.bias" in frozen and model.get_parameter("4.bias").requires_grad
        model, settings = _setup()
        with pytest.warns(UserWarning, match="4.bias"):
            groups = migrate.param_groups(model, settings, mapping, unmapped="default")
        last = groups[-1]
        assert [id(p) for p in last["params"]] == [id(model.get_parameter("4.bias"))]
        assert (last["lr"], last["weight_decay"], last["mx_indices"]) == (0.1, 0.01, [6])


ERRORS = [
    ("mapping to a missing torch param", dict(R.MAPPING, mlp_fc0_bias="0.gamma"), {}, MappingError,
     r"not in the Sequential model: \['mlp_fc0_bias -> 0.gamma'\]"),
    ("two MXNet names on one torch key", dict(R.MAPPING, mlp_fc2_bias="4.weight"), {}, MappingError,
     r"4.weight <- \['mlp_fc2_weight', 'mlp_fc2_bias'\]"),
    ("mapping is not a Mapping", [("mlp_fc0_bias", "0.bias")], {}, MappingError, "got list"),
    ("unknown unmapped policy", R.MAPPING, {"unmapped": "ignore"}, SettingsError, r"unmapped='ignore'"),
]


@pytest.mark.parametrize("description, mapping, kwargs, error, pattern", ERRORS, ids=[e[0] for e in ERRORS])
def test_param_groups_errors(description, mapping, kwargs, error, pattern):
    """Bad mappings and options raise migrate's own errors naming the culprits."""
    model, settings = _setup()
    with pytest.raises(error, match=pattern):
        migrate.param_groups(model, settings, mapping, **kwargs)
