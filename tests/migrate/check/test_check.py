"""``migrate.check_training`` and ``migrate check``: a training step compared between MXNet and torch, the first
difference localized to its layer and named with its cause; clean pairs pass; bad input is a typed error."""
import json
import re

import mxnet as mx
import numpy as np
import pytest
import torch

import migrate
from gluon_lr import Rule
from migrate.check.rounding import NOISE_FACTOR, tensor_check
from migrate.cli import main
from migrate.errors import ArgumentError, LabelsError, ModelTypeError, OutputMismatchError, UnsupportedLossError
from tests.migrate.check import check_models as C

SGD = {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}


@pytest.fixture(scope="module", autouse=True)
def own_names():
    """Gluon blocks built here are named by a NameManager of this module: the process-wide counters (that name
    the next resnet18_v1 'resnetv10_', the next BERT encoder 'bertencoder0_') stay as other test files expect."""
    with mx.name.NameManager():
        yield


@pytest.fixture(scope="module")
def conv():
    """``MxConvNet`` after one LrTrainer step (momentum SGD): (net, settings, states)."""
    net = C.gluon_conv_net()
    settings, states = C.trained_once(net, C.CONV_SHAPE, "sgd", SGD)
    return net, settings, states


def _mlp(params, **kw):
    """``mx_mlp`` after one LrTrainer step with ``params`` (and rules / freeze): (net, settings, states)."""
    net = C.mx_mlp()
    return (net,) + C.trained_once(net, C.MLP_SHAPE, "sgd", params, **kw)


def _fixed_gamma():
    """``MxConvNet`` whose first BatchNorm has MXNet's fix_gamma=True (Gluon's scale=False), one plain SGD step:
    (net, settings, states, its stock torch twin, batch shape)."""
    net = C.gluon_conv_net(scale=False)
    return (net,) + C.trained_once(net, C.CONV_SHAPE, "sgd", {"learning_rate": 0.1}) + (C.TorchConvNet(),
                                                                                       C.CONV_SHAPE)


def _stock_sgd(**kw):
    return lambda model: torch.optim.SGD(model.parameters(), lr=0.1, **kw)


# (description, model pair, torch model kwargs, check_training kwargs, first divergence (kind, MXNet name, step),
#  cause pattern)
CAUSES = [
    ("torch BatchNorm with momentum 0.9", "conv", {"momentum": 0.9}, {},
     ("running statistic", "bn1_running_mean", 1),
     r"^BatchNorm momentum read inverted: MXNet 'bn1_fwd' momentum 0.9 keeps 0.9 .* torch 'bn1' momentum 0.9 keeps "
     r"0.1 .* momentum=0.1$"),
    ("stock BatchNorm2d: unbiased running_var", "conv", {}, {},
     ("running statistic", "bn1_running_var", 1),
     r"^unbiased running variance: torch's stock BatchNorm 'bn1' .* n/\(n-1\) = 64/63 = 1.01587 times MXNet's \(64 "
     r"values per channel; measured 1.0158\d\)"),
    ("eps 1e-5 vs 1e-3", "conv", {"eps2": 1e-3}, {},
     ("forward", "bn2_fwd", 1), r"^eps: MXNet BatchNorm 'bn2_fwd' uses eps 1e-05, torch BatchNorm2d 'bn2' eps 0.001"),
    ("AvgPool count_include_pad", "conv", {"count_include_pad": False}, {},
     ("forward", "conv2_fwd", 1),
     r"^average pooling over padding: MXNet 'pool0_fwd' \(pad \(1, 1\)\) has count_include_pad=True, torch 'pool' "
     r"count_include_pad=False"),
    ("mean loss with rescale_grad 1/B", "mlp", {}, {"loss": "mean"},
     ("loss", "loss", 1),
     r"^mean vs sum: torch averages the loss over the batch of 4 .* 1/4 of MXNet's .*ratio 0.25\)"),
    ("a frozen layer left trainable", "mlp-frozen", {}, {"loss": "mean", "optimizer": _stock_sgd()},
     ("weight", "mlp_fc1_bias", 1),
     r"^a frozen layer left trainable: 'mlp_fc1_bias' is frozen in MXNet .* torch updates '2.bias' "
     r"\(requires_grad=True, in the optimizer\)"),
    ("wd_mult 0 lost on biases", "mlp-wd", {}, {"loss": "mean", "optimizer": _stock_sgd(weight_decay=0.01)},
     ("weight", "mlp_fc0_bias", 1),
     r"^weight decay \(MXNet's wd_mult 0 lost\): MXNet decays 'mlp_fc0_bias' by wd 0.01 x wd_mult 0 = 0, torch's "
     r"group of '0.bias' by weight_decay 0.01"),
]


@pytest.fixture(scope="module")
def pairs(conv):
    """Model pair name -> (MXNet net, torch factory taking the twin's kwargs, settings, states, batch shape)."""
    mlp, frozen = _mlp({"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}), _mlp({"learning_rate": 0.1},
                                                                                 freeze="mlp_fc1_*")
    wd = _mlp({"learning_rate": 0.1, "wd": 0.01}, rules=[Rule("*bias", wd_mult=0.0)])
    return {"conv": (conv[0], C.TorchConvNet) + conv[1:] + (C.CONV_SHAPE,),
            "mlp": (mlp[0], lambda: C.torch_mlp()) + mlp[1:] + (C.MLP_SHAPE,),
            "mlp-frozen": (frozen[0], lambda: C.torch_mlp()) + frozen[1:] + (C.MLP_SHAPE,),
            "mlp-wd": (wd[0], lambda: C.torch_mlp()) + wd[1:] + (C.MLP_SHAPE,)}


def _values(net, model) -> tuple:
    return ({k: p.data().asnumpy().copy() for k, p in net.collect_params().items()},
            {k: v.clone() for k, v in model.state_dict().items()})


class TestCheckTraining:
    """``migrate.check_training``: localization, causes, clean pairs, the models left alone."""

    @pytest.mark.parametrize("description, pair, twin, options, first, cause", CAUSES, ids=[c[0] for c in CAUSES])
    def test_cause_localized(self, pairs, description, pair, twin, options, first, cause):
        """In float32, the first divergence is the expected tensor of the expected layer at the expected step, far
        beyond the tolerance and over 100x its control runs' difference (10x beyond the rounding allowance: a cause
        does not hide in it), and its cause names both values; every row before it is within its limit."""
        net, factory, settings, states, shape = pairs[pair]
        report = migrate.check_training(net, factory(**twin), shape, settings=settings,
                                        states=None if "optimizer" in options else states, **options)
        found = report.first_divergence
        assert not report.ok and found is not None, description
        assert (found.kind, found.name.split(" + ")[0], found.step) == first, (description, found)
        assert found.max_abs_diff > 3 * report.atol * max(1.0, found.scale), found
        assert report.control and found.control is not None and found.max_abs_diff > 100 * found.control, found
        assert re.search(cause, found.cause), f"{description}: {found.cause!r}"
        index = report.rows.index(found)
        assert index > 0 and all(row.ok for row in report.rows[:index])

    @pytest.mark.parametrize("description, make, twin_options, row, cause", [
        ("fix_gamma scale trained", lambda: _fixed_gamma(), {"loss": "mean", "optimizer": _stock_sgd()},
         ("weight", "bn1_gamma", 1), r"^fix_gamma: MXNet holds 'bn1_gamma' at 1 \(BatchNorm fix_gamma=True, never "
                                     r"trained\) but torch trains 'bn1.weight'"),
        ("clipping lost", lambda: _mlp({"learning_rate": 0.1, "clip_gradient": 0.01}) + (C.torch_mlp(), C.MLP_SHAPE),
         {"loss": "mean", "optimizer": _stock_sgd()}, ("weight", "mlp_fc0_bias", 1),
         r"^clipping: MXNet clips the rescaled gradient of 'mlp_fc0_bias' to \+-0.01 \(\d+ of 12 elements beyond it "
         r"at step 1\), torch's optimizer clips at None"),
    ], ids=["fix_gamma scale trained", "clipping lost"])
    def test_cause_of_a_row(self, description, make, twin_options, row, cause):
        """Patterns found on their row (not necessarily the first divergence): the cause names both values."""
        net, settings, _, model, shape = make()
        report = migrate.check_training(net, model, shape, settings=settings, **twin_options)
        found = next(r for r in report.rows if (r.kind, r.name, r.step) == row)
        assert not found.ok and re.search(cause, found.cause), (description, found)

    def test_unbiased_variance_only_running_variances(self, pairs):
        """Stock BatchNorm2d twin: every forward output, the loss, every gradient, weight and momentum buffer
        equal within 1e-5; exactly the two running variances diverge, each with the unbiased-variance cause."""
        net, factory, settings, states, shape = pairs["conv"]
        report = migrate.check_training(net, factory(), shape, settings=settings, states=states, atol=1e-5)
        assert [r.torch_name for r in report.diverged] == ["bn1.running_var", "bn2.running_var"]
        assert all(r.cause.startswith("unbiased running variance") for r in report.diverged)
        kinds = {r.kind for r in report.rows if r.ok and r.compared}
        assert kinds == {"forward", "loss", "gradient", "weight", "state", "running statistic"}
        assert len(report.rows) == 5 + 1 + 8 + 2 * 8 + 4  # nodes, loss, gradients, weights + states, statistics

    def test_clean_pair_and_models_left_alone(self, pairs):
        """The MLP twin with migrate's exact optimizer and a summed loss: 2 steps, all 3 + 2 x (1 + 6 + 6) + 6
        tensors equal within 1e-5 (weights, momentum buffers); neither model given is changed."""
        net, factory, settings, states, shape = pairs["mlp"]
        model = factory()
        before = _values(net, model)
        report = migrate.check_training(net, model, shape, settings=settings, states=states, steps=2, atol=1e-5)
        assert report.ok and report.first_divergence is None, str(report)
        assert len(report.rows) == 3 + 1 + 6 + 2 * 12 + 1 and all(r.compared for r in report.rows)
        assert min(r.scale for r in report.rows if r.kind == "state") > 1e-3, "momentum buffers hold the MXNet run"
        after = _values(net, model)
        assert all(np.array_equal(before[0][k], after[0][k]) for k in before[0])
        assert all(torch.equal(before[1][k], after[1][k]) for k in before[1])
        assert "OK" in str(report) and json.loads(report.to_json())["schema_version"] == 2

    def test_without_settings_forward_and_gradients(self, pairs):
        """No settings: forward outputs, loss and gradients only, each side rescaled by 1/B; a note says so."""
        net, factory, _, _, shape = pairs["mlp"]
        report = migrate.check_training(net, factory(), shape)
        assert report.ok and report.steps == 0 and {r.kind for r in report.rows} == {"forward", "loss", "gradient"}
        assert report.notes == ["no settings: forward outputs, loss and gradients only (no optimizer step)"]

    def test_dropout_disabled_on_both_sides(self):
        """A Dropout(0.5) in both models: disabled on both sides with a note naming them; the pair then matches."""
        from tests.migrate import models as M
        net, model = M.gluon(M.MxDenseStack), M.TorchDenseStack()
        report = migrate.check_training(net, model, (4, 16))
        assert report.ok, str(report)
        assert re.match(r"Dropout disabled on both sides .*: MXNet \S*dropout0_fwd; torch drop$", report.notes[0])
        assert model.drop.p == 0.5, "the model given keeps its dropout"


class TestCleanPasses:
    """Real pairs that train alike: GluonNLP BERT vs HF BertModel; model-zoo resnet18_v1 vs torchvision resnet18."""

    def test_bert_vs_hf(self, tmp_path):
        """K=1, dropout 0, token ids without 0: every node, gradient, weight and momentum buffer within 1e-5; with
        token 0 in the batch HF's padding_idx=0 row is the first divergence, with that cause."""
        pytest.importorskip("gluonnlp")
        from tests.migrate.mapping.test_transformers import VOCAB, _gluon_bert, _hf_bert
        from tests.migrate._mx_reference import exported_settings
        import gluon_lr
        net, model = _gluon_bert(), _hf_bert()
        trainer = gluon_lr.LrTrainer(net, "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4}, kvstore=None)
        settings = exported_settings(trainer)
        rng = np.random.default_rng(0)
        ids, types = rng.integers(1, VOCAB, (2, 8)), rng.integers(0, 2, (2, 8))
        report = migrate.check_training(net, model, [ids, types], settings=settings, atol=1e-5)
        assert report.ok, str(report)
        assert sum(r.kind == "gradient" for r in report.rows) == 39 and report.steps == 1
        ids[0, 0] = 0
        report = migrate.check_training(net, model, [ids, types], settings=settings, atol=1e-5)
        first = report.first_divergence
        assert (first.kind, first.torch_name) == ("gradient", "bert.embeddings.word_embeddings.weight")
        assert first.cause.startswith("embedding padding row: torch 'bert.embeddings.word_embeddings.weight' is an "
                                      "Embedding with padding_idx=0")

    def test_resnet18_vs_torchvision(self):
        """Exact SGD, K=3, softmax cross-entropy on (4, 3, 32, 32), float32 and the default atol: every forward
        output, loss, gradient, weight and momentum buffer accepted (those beyond atol within 3x their control, some
        of them); only running variances diverge, each with the unbiased-variance cause, the first on the first
        BatchNorm of stage 1 after step 1; after step 1 each of the 20 lies over 100x its control and beyond 1e-6,
        those beyond atol (most) diverge there (by step 3 rounding has grown near some of their differences)."""
        torchvision = pytest.importorskip("torchvision")
        from mxnet.gluon.model_zoo import vision
        from tests.migrate._mx_reference import exported_settings
        import gluon_lr
        mx.random.seed(0)
        net = vision.resnet18_v1()
        net.initialize(mx.init.Xavier())
        net(mx.nd.zeros((1, 3, 32, 32)))
        trainer = gluon_lr.LrTrainer(net, "sgd", {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-4,
                                                  "rescale_grad": 1 / 4}, kvstore=None)
        rng = np.random.default_rng(0)
        x, labels = rng.standard_normal((4, 3, 32, 32)).astype(np.float32), rng.integers(0, 1000, 4)
        report = migrate.check_training(net, torchvision.models.resnet18(), x, labels=labels,
                                        settings=exported_settings(trainer), steps=3)
        variances = [r for r in report.rows if r.torch_name.endswith("running_var")]
        first_step = [r for r in variances if r.step == 1]
        assert len(variances) == 3 * 20 and len(first_step) == 20
        assert all(r.max_abs_diff > max(1e-6 * max(1.0, r.scale), 100 * r.control) for r in first_step), first_step
        beyond = [r for r in first_step if r.max_abs_diff > 1e-4 * max(1.0, r.scale)]
        assert len(beyond) > 10 and report.diverged[:len(beyond)] == beyond
        assert all(r in variances and r.cause.startswith("unbiased running variance") for r in report.diverged)
        first = report.first_divergence
        assert (first.name, first.torch_name, first.step) == ("resnetv10_stage1_batchnorm0_running_var",
                                                              "layer1.0.bn1.running_var", 1)
        others = [r for r in report.rows if r not in variances]
        counts = {kind: sum(r.kind == kind for r in others) for kind in ("forward", "loss", "gradient", "weight",
                                                                          "state")}
        assert counts == {"forward": 41, "loss": 3, "gradient": 62, "weight": 3 * 62, "state": 3 * 62}
        _assert_within_rounding(report, others)

    @pytest.mark.parametrize("size", [64, 32])
    def test_resnet50_generated_module(self, tmp_path, size):
        """model-zoo resnet50_v1 against its generated module (an exact twin), (2, 3, size, size), K=1, float32: all
        793 tensors accepted, those beyond atol within 3x their control; the tensors whose rounding noise exceeds
        1% of their magnitude are named in a note (stage 4's BatchNorms normalize 8 values per channel at 64, 2 at
        32, where float32 gradients are rounding alone and torch's rounds worse than MXNet's)."""
        from mxnet.gluon.model_zoo import vision
        from tests.migrate._mx_reference import exported_settings
        import gluon_lr
        mx.random.seed(0)
        net = vision.resnet50_v1()
        net.initialize(mx.init.Xavier())
        net(mx.nd.zeros((1, 3, size, size)))
        trainer = gluon_lr.LrTrainer(net, "sgd", {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-4,
                                                  "rescale_grad": 1 / 2}, kvstore=None)
        model = migrate.generate_torch(net, (1, 3, size, size), str(tmp_path / "model.py"))
        rng = np.random.default_rng(0)
        x, labels = rng.standard_normal((2, 3, size, size)).astype(np.float32), rng.integers(0, 1000, 2)
        report = migrate.check_training(net, model, x, labels=labels, settings=exported_settings(trainer))
        assert report.ok and sum(r.compared for r in report.rows) == 793, str(report)
        _assert_within_rounding(report, report.rows)
        noisy = [r.name for r in report.rows if r.control is not None and r.control > 0.01 * r.scale]
        assert noisy and re.search(rf"^the control runs move {len(noisy)} tensors by over 1% .*--float64",
                                   report.notes[-1]), report.notes

    def test_float64_without_control(self, pairs):
        """``float64=True``: no control runs (``control`` None on every row), judged by atol alone: at 1e-7 the
        stock twin's running variances diverge (unbiased update), every other tensor is within it."""
        net, factory, settings, states, shape = pairs["conv"]
        report = migrate.check_training(net, factory(), shape, settings=settings, states=states, atol=1e-7,
                                        float64=True)
        assert report.control == "" and report.noise_factor is None and all(r.control is None for r in report.rows)
        assert [r.torch_name for r in report.diverged] == ["bn1.running_var", "bn2.running_var"], str(report)
        assert "control" not in "\n".join(report.summary())


    def test_without_control_runs(self, pairs):
        """``perturbation=None`` in float32: no control runs, atol alone; the clean MLP twin still passes at 1e-5."""
        net, factory, settings, states, shape = pairs["mlp"]
        report = migrate.check_training(net, factory(), shape, settings=settings, states=states, atol=1e-5,
                                        perturbation=None)
        assert report.ok and report.control == "" and all(r.control is None and not r.rounding for r in report.rows)


def _assert_within_rounding(report, rows):
    """Every row of ``rows`` accepted; those beyond atol (some) within 3x their control (NOISE_FACTOR is 10)."""
    assert all(r.ok for r in rows), [r for r in rows if not r.ok][:3]
    beyond = [r for r in rows if r.compared and r.max_abs_diff > report.atol * max(1.0, r.scale)]
    assert beyond and all(r.rounding for r in beyond)
    worst = max(beyond, key=lambda r: r.max_abs_diff / r.control)
    assert worst.max_abs_diff <= 3 * worst.control, worst
    assert re.search(r"\n\S+ +\S+ +\S+ +\d+ +\S+ +\S+ +\S+ +ok \(rounding\)\n", str(report))


class TestRoundingRule:
    """``tensor_check``: a difference counts beyond max(atol x max(1, |MXNet|), NOISE_FACTOR x control)."""

    ONES = np.ones(3)

    @pytest.mark.parametrize("description, torch_value, controls, ok, rounding, control, limit", [
        ("no control: atol", ONES + 2e-4, (None, None), False, False, None, 1e-4),
        ("control 0 keeps atol", ONES + 2e-4, (ONES, ONES + 2e-4), False, False, 0.0, 1e-4),
        ("within 10x the control: rounding", ONES + 2e-4, (ONES + 3e-5, None), True, True, 3e-5, 3e-4),
        ("beyond 10x the control", ONES + 5e-4, (ONES + 3e-5, None), False, False, 3e-5, 3e-4),
        ("the larger control of the two", ONES + 2e-4, (ONES + 1e-5, ONES + 2.3e-4), True, True, 3e-5, 3e-4),
        ("within atol: not rounding", ONES + 5e-5, (ONES + 3e-5, None), True, False, 3e-5, 3e-4),
    ], ids=lambda v: v if isinstance(v, str) else "")
    def test_limit(self, description, torch_value, controls, ok, rounding, control, limit):
        """The limit, the verdict and whether only the control's allowance admits the difference, by hand."""
        row = tensor_check("w", "w", "weight", 1, self.ONES, torch_value, 1e-4, controls)
        assert (row.ok, row.rounding) == (ok, rounding), (description, row)
        assert (row.control is None) == (control is None) and row.control == pytest.approx(control, abs=1e-12)
        assert row.limit == pytest.approx(limit, rel=1e-9) and NOISE_FACTOR == 10

    def test_scale_above_one(self):
        """Above magnitude 1 the atol part is relative: |MXNet| 100, difference 5e-3 within 1e-4 x 100."""
        row = tensor_check("w", "w", "weight", 1, 100 * self.ONES, 100 * self.ONES + 5e-3, 1e-4, (None, None))
        assert row.ok and not row.rounding and row.limit == pytest.approx(1e-2)


BAD = [  # (description, check_training kwargs, error type, message pattern)
    ("labels of the wrong shape", {"labels": np.zeros(3, np.int64)}, LabelsError,
     r"labels: integer class ids must have shape \(4,\) for an output of shape \(4, 5\).*received shape \(3,\)"),
    ("labels of the wrong dtype", {"labels": np.zeros(4, bool)}, LabelsError,
     r"labels: expected integer class ids or float32/float64 targets; received dtype bool"),
    ("class ids out of range", {"labels": np.array([0, 1, 2, 5])}, LabelsError, r"class ids must lie in \[0, 5\)"),
    ("float targets of another shape", {"labels": np.zeros((4, 3), np.float32)}, LabelsError,
     r"float targets must have the output's shape \(4, 5\) \(squared error\); received shape \(4, 3\)"),
    ("a loss the tool cannot express", {"loss": "l1"}, UnsupportedLossError, r"^loss 'l1': check_training runs only"),
    ("a loss function", {"loss": torch.nn.functional.l1_loss}, UnsupportedLossError, r"^loss 'function'"),
    ("zero steps", {"steps": 0}, ArgumentError, r"^check_training\(steps\) must be an integer from 1 to 1000 .*got 0"),
    ("10**20 steps", {"steps": 10 ** 20}, ArgumentError, r"^check_training\(steps\) must be an integer from 1 to "
     r"1000 .* got 100000000000000000000"),
    ("a negative tolerance", {"atol": -1e-5}, ArgumentError, r"^check_training\(atol\) must be a finite number"),
    ("a control perturbation out of range", {"perturbation": 0.5}, ArgumentError,
     r"^check_training\(perturbation\) must be a finite number in \(0, 0.01\], got 0.5"),
    ("a model class, not a model", {"torch_model": "class"}, ModelTypeError,
     r"check_training\(torch_model\) must be a torch.nn.Module instance, got the class TorchConvNet"),
    ("a mapping that is a plain dict", {"mapping": {"conv1_weight": "conv1.weight"}}, ArgumentError,
     r"^check_training\(mapping\) must be a NameMapping .* got dict"),
    ("an optimizer that is no factory", {"optimizer": "sgd"}, ArgumentError,
     r"check_training\(optimizer\) must be None .* got str"),
    ("a factory returning no optimizer", {"optimizer": lambda model: model.parameters()}, ArgumentError,
     r"check_training\(optimizer\)\(model\) must be a torch.optim.Optimizer, got generator"),
    ("outputs that do not correspond", {"torch_model": "two outputs"}, OutputMismatchError,
     r"MXNet gives 1 output\(s\) of shapes \[\(4, 5\)\], torch 2 of shapes \[\(4, 5\), \(4, 5\)\]"),
]


class _TwoOutputs(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        out = self.inner(x)
        return out, out * 2


@pytest.mark.parametrize("description, kwargs, error, pattern", BAD, ids=[b[0] for b in BAD])
def test_bad_input(conv, description, kwargs, error, pattern):
    """Each bad input is the typed error naming it; the models given are unchanged."""
    net, settings, states = conv
    model = C.TorchConvNet()
    kwargs = dict(kwargs)
    kind = kwargs.pop("torch_model", None)
    if kind == "two outputs":
        model = _TwoOutputs(model)
    given = C.TorchConvNet if kind == "class" else model
    before = _values(net, model)
    with pytest.raises(error, match=pattern):
        migrate.check_training(net, given, C.CONV_SHAPE, settings=settings, states=states, **kwargs)
    after = _values(net, model)
    assert all(np.array_equal(before[0][k], after[0][k]) for k in before[0])
    assert all(torch.equal(before[1][k], after[1][k]) for k in before[1])


# ---------------------------------------------------------------- the command line


@pytest.fixture(scope="module")
def conv_files(conv, tmp_path_factory):
    """``MxConvNet``'s symbol and params files (as HybridBlock.export writes them), settings and states."""
    net, settings, states = conv
    folder = tmp_path_factory.mktemp("check")
    symbol = net(mx.sym.var("data"))  # what HybridBlock.export writes, without hybridizing the shared net
    symbol.save(str(folder / "conv-symbol.json"))
    arguments = set(symbol.list_arguments())
    mx.nd.save(str(folder / "conv-0000.params"), {("arg:" if name in arguments else "aux:") + name: param.data()
                                                  for name, param in net.collect_params().items()})
    (folder / "settings.json").write_text(json.dumps(settings))
    (folder / "trainer.states").write_bytes(states)
    return folder


def _check_args(folder, *extra):
    return ["check", "--symbol", str(folder / "conv-symbol.json"), "--params", str(folder / "conv-0000.params"),
            "--settings", str(folder / "settings.json"), "--states", str(folder / "trainer.states"), "--torch",
            "tests.migrate.check.check_models:TorchConvNet", "--input-shape", ",".join(map(str, C.CONV_SHAPE)), *extra]


@pytest.fixture(scope="module")
def t06_files(tmp_path_factory):
    """Tutorial 6's MXNet files after 3 steps (TinySENet: depthwise convs, squeeze-and-excitation, 'full' pooling)."""
    import io
    from tutorials import t06_generate
    folder = tmp_path_factory.mktemp("t06")
    t06_generate.mxnet_phase(3, str(folder), log=io.StringIO())
    return folder


class TestCheckCommand:
    """``migrate check``: the table, the JSON document, the exit codes."""

    def test_generated_module_of_tutorial_6(self, t06_files, tmp_path, capsys):
        """``check --torch generate --steps 3``: exit 0, all 181 tensors within 1e-4; ``all --check-training 3``
        adds the same check to its report (exit 0, report.json's check section)."""
        from tutorials import t06_generate
        files = t06_generate.migrate_args(str(t06_files), str(tmp_path / "out"))
        flags = files[1:files.index("--out")]
        code = main(["check", *flags, "--steps", "3", "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert code == 0 and doc["checks"] == {"equivalent": True, "training": True}, doc["status"]
        assert (doc["check"]["compared"], doc["check"]["diverged"], doc["check"]["steps"]) == (181, 0, 3)
        code = main(["all", *flags, "--out", str(tmp_path / "out"), "--check-training", "3"])
        report = json.loads((tmp_path / "out" / "report.json").read_text())
        assert code == 0 and report["checks"]["training"] is True and report["check"]["compared"] == 181
        assert re.search(r"training check: 181 tensors equal within atol 0.0001 or 10x their control over 3 step\(s\)"
                         r"( \(\d+ beyond atol, within rounding\))?: OK", capsys.readouterr().out)

    def test_diverged_exit_1_json(self, conv_files, capsys):
        """The stock twin: exit 1; one JSON document (schema_version 1) whose check section names the first
        divergence and its cause; nothing is written next to the inputs."""
        before = sorted(p.name for p in conv_files.iterdir())
        code = main(_check_args(conv_files, "--json", "--steps", "2"))
        out = capsys.readouterr().out
        doc = json.loads(out)
        assert code == 1 and doc["exit_code"] == 1 and doc["schema_version"] == 1
        assert doc["checks"] == {"equivalent": True, "training": False}
        check = doc["check"]
        assert check["schema_version"] == 2 and check["steps"] == 2 and check["diverged"] == 4
        assert check["noise_factor"] == NOISE_FACTOR and all(r["limit"] >= 10 * r["control"] for r in check["rows"]
                                                              if r["control"] is not None)
        assert check["first_divergence"]["name"] == "bn1_running_var"
        assert check["first_divergence"]["cause"].startswith("unbiased running variance")
        assert sorted(p.name for p in conv_files.iterdir()) == before

    def test_table_names_the_cause(self, conv_files, capsys):
        """Without --json: the table with 'DIVERGES (BatchNorm momentum read inverted)' on the first BatchNorm's
        running mean, and the cause with both values under it."""
        code = main(_check_args(conv_files, "--kwargs", '{"momentum": 0.9}'))
        out = capsys.readouterr().out
        assert code == 1
        assert re.search(r"bn1_running_mean +bn1.running_mean +running statistic +1 .*DIVERGES \(BatchNorm momentum "
                         r"read inverted\)", out)
        assert "likely cause: BatchNorm momentum read inverted: MXNet 'bn1_fwd' momentum 0.9" in out

    @pytest.mark.parametrize("extra, pattern", [
        (["--labels", "{labels}"], r"--labels .*integer class ids must have shape \(4,\)"),
        (["--labels", "{missing}"], r"--labels .*file not found"),
        (["--steps", "0"], r"--steps 0: expected a number of optimizer steps from 1 to 1000"),
        (["--steps", "99999999999999999999"], r"--steps 99999999999999999999: expected a number of optimizer steps "
         r"from 1 to 1000"),
        (["--loss", "l1"], r"argument --loss: invalid choice: 'l1'"),
    ], ids=["labels of the wrong shape", "missing labels file", "zero steps", "1e20 steps", "unknown loss"])
    def test_usage_errors_exit_2(self, conv_files, tmp_path, capsys, extra, pattern):
        """Bad --labels, --steps or --loss: exit 2, one line naming the flag, no traceback, nothing written."""
        np.save(tmp_path / "labels.npy", np.zeros(3, np.int64))
        values = {"labels": tmp_path / "labels.npy", "missing": tmp_path / "absent.npy"}
        before = sorted(p.name for p in tmp_path.iterdir())
        code = main(_check_args(conv_files, *[str(e).format(**values) for e in extra]))
        err = capsys.readouterr().err
        assert code == 2 and re.search(pattern, err), err[-1000:]
        assert "Traceback" not in err and sorted(p.name for p in tmp_path.iterdir()) == before

    def test_all_check_training_zero_exit_2(self, conv_files, tmp_path, capsys):
        """``all --check-training 0``: exit 2 naming the flag before any work; no output folder."""
        argv = _check_args(conv_files)
        argv = ["all"] + argv[1:argv.index("--input-shape") + 2] + ["--out", str(tmp_path / "out"),
                                                                     "--check-training", "0"]
        assert main(argv) == 2
        assert "--check-training 0: expected a number of optimizer steps from 1 to 1000" in capsys.readouterr().err
        assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- dropout, NaN, MXNet's PReLU bug, the ratio rule


class TestDropoutOff:
    """Dropout is off on both sides however the torch model drops: a Dropout module or ``F.dropout`` in ``forward``."""

    @pytest.mark.parametrize("kind, named", [("module", "drop"), ("functional", "F.dropout x 2")])
    def test_twin_with_dropout_agrees(self, kind, named):
        """MXNet's Dropout(0.5) and the twin's are off: every tensor agrees over 2 steps (dropping would move the
        outputs by their own size), and the notes name what was switched off on each side."""
        net = C.gluon_dropout_mlp()
        settings, states = C.trained_once(net, C.MLP_SHAPE, "sgd", {"learning_rate": 0.1, "momentum": 0.9})
        model = C.TorchDropoutMLP(functional=kind == "functional")
        report = migrate.check_training(net, model, C.MLP_SHAPE, settings=settings, states=states, steps=2)
        assert report.ok, str(report)
        note = f"Dropout disabled on both sides (MXNet's masks cannot be drawn in torch): MXNet drop_dropout_fwd; torch"
        assert f"{note} {named}" in report.notes, report.notes
        assert model.training and all(m.training for m in model.modules())  # the model given is left as it was

    def test_every_dropout_function_is_the_identity(self):
        """Under DropoutOff each dropout function returns its input (the gradient flows through unchanged) and the
        calls that would have dropped are counted by name; F.dropout(training=False) is not counted."""
        from migrate.check.torch_training import DropoutOff
        F = torch.nn.functional
        x = torch.randn(2, 3, 4, 5, requires_grad=True)
        with DropoutOff() as off:
            outputs = [F.dropout(x, 0.5), torch.nn.Dropout2d(0.3)(x), F.dropout3d(x, 0.2),
                       F.alpha_dropout(x, 0.1, True), F.feature_alpha_dropout(x, 0.4, True), torch.dropout(x, 0.2, True),
                       F.dropout(x, 0.5, False), torch.feature_dropout(x, 0.5, True)]
        assert all(out is x for out in outputs)
        sum(out.sum() for out in outputs).backward()
        assert torch.equal(x.grad, torch.full_like(x, 8.0))
        assert dict(off.calls) == {"F.dropout": 1, "F.dropout2d": 1, "F.dropout3d": 1, "F.alpha_dropout": 1,
                                   "F.feature_alpha_dropout": 1, "torch.dropout": 1, "torch.feature_dropout": 1}


class _Overflows(torch.nn.Module):
    """A twin whose output overflows float32 in torch only (times 1e30 twice)."""

    def __init__(self):
        super().__init__()
        self.inner = C.torch_mlp()

    def forward(self, x):
        return self.inner(x) * 1e30 * 1e30


def _with_nan(net, name, count):
    """``net`` with the first ``count`` values of parameter ``name`` set to NaN."""
    value = net.collect_params()[name].data().asnumpy()
    value.reshape(-1)[:count] = np.nan
    net.collect_params()[name].set_data(mx.nd.array(value))
    return net


NOT_FINITE = [  # (description, MXNet net, torch model, check_training kwargs, first divergence (kind, name), cause)
    ("NaN weights", lambda: _with_nan(C.gluon_conv_net(), "conv1_weight", 3), C.TorchConvNet, {"shape": C.CONV_SHAPE},
     ("forward", "conv1_fwd"), r"^not finite: MXNet weight 'conv1_weight' \(3 NaN, 0 inf of 216\) before step 1; every "
     r"tensor computed from them is NaN or inf on both sides \(MXNet: \d+ NaN, 0 inf of 512; torch: \d+ NaN"),
    ("all-NaN labels", C.mx_mlp, C.torch_mlp, {"shape": C.MLP_SHAPE, "labels": np.full((4, 4), np.nan, np.float32)},
     ("loss", "loss"), r"^not finite: the labels \(16 NaN, 0 inf of 16\) before step 1"),
    ("NaN in the batch", C.mx_mlp, C.torch_mlp, {"shape": np.where(np.eye(4, 6) > 0, np.nan, 1.0).astype(np.float32)},
     ("forward", "mlp_fc0_fwd"), r"^not finite: input 0 of the batch \(4 NaN, 0 inf of 24\) before step 1"),
    ("an overflow in torch alone", C.mx_mlp, _Overflows, {"shape": C.MLP_SHAPE},
     ("loss", "loss"), r"^not finite: the values turn NaN or inf first here \(MXNet: 0 NaN, 0 inf of 1; torch: [01] "
     r"NaN, [01] inf of 1\) from finite weights, states, batch and labels: the computation overflows or divides by "
     r"zero at this step in one framework"),
]


@pytest.mark.parametrize("description, make_net, make_model, kwargs, first, cause", NOT_FINITE,
                         ids=[c[0] for c in NOT_FINITE])
def test_not_finite_is_named(description, make_net, make_model, kwargs, first, cause):
    """NaN or inf: the first divergence says 'not finite' and where it comes from (the weight, the labels, the batch
    by name and count), or that it arises at that tensor; never 'not recognised'."""
    kwargs = dict(kwargs)
    report = migrate.check_training(make_net(), make_model(), kwargs.pop("shape"), **kwargs)
    found = report.first_divergence
    assert found is not None and (found.kind, found.name) == first, (description, found)
    assert re.search(cause, found.cause), f"{description}: {found.cause!r}"
    assert "DIVERGES (not finite)" in str(report) and "not recognised" not in str(report)


def test_cli_names_nan_weights(conv_files, tmp_path, capsys):
    """`migrate check` with a params file holding NaN: exit 1, the table and the cause say 'not finite' and name the
    weight (the CLI said 'not recognised')."""
    params = mx.nd.load(str(conv_files / "conv-0000.params"))
    weight = params["arg:conv1_weight"].asnumpy()
    weight[0, 0, 0, 0] = np.nan
    params["arg:conv1_weight"] = mx.nd.array(weight)
    mx.nd.save(str(tmp_path / "nan-0000.params"), params)
    argv = _check_args(conv_files)
    argv[argv.index("--params") + 1] = str(tmp_path / "nan-0000.params")
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "conv1_fwd" in out and "DIVERGES (not finite)" in out, out[-3000:]
    assert "likely cause: not finite: MXNet weight 'conv1_weight' (1 NaN, 0 inf of 216) before step 1" in out


class _ScaledGradient(torch.autograd.Function):
    """The identity, whose gradient is 4 times the one it is given."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * 4


class _ScaledLinear(torch.nn.Linear):
    """A Linear whose weight's gradient comes out 4 times larger (the batch size of the MLP pair)."""

    def forward(self, x):
        return torch.nn.functional.linear(x, _ScaledGradient.apply(self.weight), self.bias)


class TestGradientCauses:
    def test_prelu_gradient_bug_is_named(self):
        """In float64 (MXNet without MKLDNN) a Module's PReLU slope gradient comes out times the slope: the first
        divergence is the slopes' gradient, named as MXNet's bug with the slope, and the slopes' weight and momentum
        after the step too; with batch 4 = 1/0.25 no row is called a batch reduction; every other tensor agrees (but
        the stock BatchNorm's running variance, a cause of its own)."""
        net = C.gluon_prelu_net()
        settings, states = C.trained_once(net, C.CONV_SHAPE, "sgd", {"learning_rate": 0.1, "momentum": 0.9})
        report = migrate.check_training(net, C.TorchPReLUNet(), C.CONV_SHAPE, settings=settings, states=states,
                                        float64=True)
        found = report.first_divergence
        assert (found.kind, found.name, found.torch_name) == ("gradient", "prelu_alpha", "act.weight"), found
        assert re.search(r"^MXNet's PReLU gradient bug: MXNet 1.9.1 without MKLDNN \(float64, or "
                         r"MXNET_MKLDNN_ENABLED=0\) gives a Module's slope gradient times the slope: MXNet's gradient "
                         r"of 'prelu_alpha' is the slope \(0.2\d+", found.cause), found.cause
        causes = {(r.kind, r.name): r.cause.split(":")[0] for r in report.diverged}
        assert causes == {("gradient", "prelu_alpha"): "MXNet's PReLU gradient bug",
                          ("weight", "prelu_alpha"): "MXNet's PReLU gradient bug",
                          ("state", "prelu_alpha:momentum_buffer"): "MXNet's PReLU gradient bug",
                          ("running statistic", "bn_running_var"): "unbiased running variance"}, causes  # stock BN
        assert "sum vs mean" not in str(report) and "mean vs sum" not in str(report)

    def test_one_scaled_gradient_is_no_batch_reduction(self, pairs):
        """A torch twin that scales one gradient by the batch size (4, one Linear's weight): that gradient
        diverges with ratio 4 but shares it with no other, so it is not called 'sum vs mean'; a mean loss scales
        every gradient alike, and each is 'mean vs sum' with the ratio shared by all."""
        net, factory, settings, states, shape = pairs["mlp"]
        model, mapping = factory(), migrate.name_mapping(net, factory(), shape)
        scaled = _ScaledLinear(12, 10)
        scaled.load_state_dict(model[2].state_dict())
        model[2] = scaled
        report = migrate.check_training(net, model, shape, settings=settings, states=states, mapping=mapping)
        gradients = [r for r in report.diverged if r.kind == "gradient"]
        assert [(r.name, r.cause) for r in gradients] == [("mlp_fc1_weight", "")], gradients
        mean = migrate.check_training(net, factory(), shape, settings=settings, states=states, loss="mean")
        gradients = [r for r in mean.rows if r.kind == "gradient"]
        assert len(gradients) == 6 and all(re.search(r"^mean vs sum: .*the same ratio in 6 of 6 gradients", r.cause)
                                           for r in gradients), [r.cause for r in gradients]
