"""gluon.rnn LSTM/GRU/RNN against torch.nn: names by hand, weights copied through the mapping, outputs compared."""
import re

import numpy as np
import pytest

import migrate

VOCAB, EMBED, HIDDEN, BATCH, STEPS = 12, 4, 6, 2, 5
CASES = [("lstm", 1, False, False), ("lstm", 2, True, False), ("gru", 2, True, True), ("gru", 1, False, True),
         ("rnn", 2, True, False), ("lstm", 3, False, True)]


def _gluon(mode, layers, bidirectional, embed, seed=0, **kwargs):
    import mxnet as mx
    layer = {"lstm": mx.gluon.rnn.LSTM, "gru": mx.gluon.rnn.GRU, "rnn": mx.gluon.rnn.RNN}[mode]
    if mode == "rnn":
        kwargs.setdefault("activation", "tanh")  # gluon's default is relu, torch's tanh

    class Net(mx.gluon.HybridBlock):
        def __init__(self):
            super().__init__(prefix="net_")
            with self.name_scope():
                self.embed = mx.gluon.nn.Embedding(VOCAB, EMBED) if embed else None
                self.rnn = layer(HIDDEN, num_layers=layers, layout="NTC", bidirectional=bidirectional,
                                 input_size=EMBED, **kwargs)

        def hybrid_forward(self, F, x):
            return self.rnn(self.embed(x) if self.embed is not None else x)

    mx.random.seed(seed)
    net = Net()
    net.initialize(mx.init.Uniform(1.0))
    return net


def _torch(mode, layers, bidirectional, embed, seed=1):
    import torch
    layer = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[mode]

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(VOCAB, EMBED) if embed else None
            self.rnn = layer(EMBED, HIDDEN, num_layers=layers, batch_first=True, bidirectional=bidirectional)

        def forward(self, x):
            return self.rnn(self.embed(x) if self.embed is not None else x)[0]

    torch.manual_seed(seed)
    return Net()


def _truth(mx_name: str) -> str:
    """The torch key of a gluon.rnn parameter, written by hand: l0_i2h_weight -> rnn.weight_ih_l0 (r0_: _reverse)."""
    if mx_name.endswith("embedding0_weight"):
        return "embed.weight"
    d, layer, gate, kind = re.search(r"([lr])(\d+)_(i2h|h2h)_(weight|bias)$", mx_name).groups()
    return f"rnn.{kind}_{gate[0]}{gate[2]}_l{layer}{'_reverse' if d == 'r' else ''}"


def _shape_dtype(embed):
    return ((BATCH, STEPS), np.int64) if embed else ((BATCH, STEPS, EMBED), np.float32)


@pytest.mark.parametrize("mode,layers,bidirectional,embed", CASES)
class TestRecurrentPairs:
    def test_names_and_outputs(self, mode, layers, bidirectional, embed):
        """Every tensor maps to the hand-written torch key; the copied torch model gives MXNet's outputs."""
        import mxnet as mx
        import torch
        net, model = _gluon(mode, layers, bidirectional, embed), _torch(mode, layers, bidirectional, embed)
        shape, dtype = _shape_dtype(embed)
        mapping = migrate.name_mapping(net, model, shape, input_dtypes=dtype)
        assert mapping.ok, mapping.differences
        names = {p.name for p in net.collect_params().values()}
        assert set(mapping) == names and len(names) == len(model.state_dict())
        assert {k: mapping[k] for k in mapping} == {k: _truth(k) for k in names}
        assert all(mapping.entry(k)["steps"] == [] for k in mapping)
        model.load_state_dict(migrate.convert_weights({p.name: p.data() for p in net.collect_params().values()},
                                                      mapping, model))
        x = np.random.default_rng(0).integers(0, VOCAB, shape) if embed else \
            np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        want = net(mx.nd.array(x, dtype="int64" if embed else "float32")).asnumpy()
        with torch.no_grad():
            got = model.eval()(torch.from_numpy(x)).numpy()
        assert want.shape == got.shape == (BATCH, STEPS, HIDDEN * (2 if bidirectional else 1))
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
        assert np.abs(want).max() > 0.05  # the outputs compared are not all near zero


class TestRealDifferences:
    @pytest.mark.parametrize("left,right,expected", [
        (("lstm", 1, False, False), ("gru", 1, False, False), r"MXNet LSTM .*l0_i2h_weight.*no counterpart"),
        (("gru", 1, True, False), ("gru", 1, False, False), r"torch GRU .*weight_ih_l0.*no counterpart"),
        (("lstm", 2, False, False), ("lstm", 1, False, False), r"MXNet LSTM .*l1_i2h_weight.*no counterpart"),
    ])
    def test_reported_by_name(self, left, right, expected):
        """LSTM vs GRU, bidirectional vs not, an extra layer: not ok, and the difference names the tensor."""
        net, model = _gluon(*left), _torch(*right)
        mapping = migrate.name_mapping(net, model, _shape_dtype(left[3])[0])
        assert not mapping.ok
        assert any(re.search(expected, d) for d in mapping.differences), mapping.differences

    def test_activation_named_with_both_sides(self):
        """gluon.rnn.RNN's default relu against torch.nn.RNN's tanh: both sides named, both activations shown."""
        net, model = _gluon("rnn", 1, False, False, activation="relu"), _torch("rnn", 1, False, False)
        mapping = migrate.name_mapping(net, model, _shape_dtype(False)[0])
        assert mapping.differences == ["MXNet RNN 'net_rnn0_l0_i2h_weight' vs torch RNN 'rnn.weight_ih_l0': "
                                       "activations ('Relu',) vs ('Tanh',)"]


def test_param_groups_follow_the_mapping():
    """h2h tensors with lr_mult 0.5 land in torch's weight_hh/bias_hh group at lr 0.05; the rest at 0.1."""
    from tests.migrate import _mx_reference as R
    net, model = _gluon("lstm", 2, True, False), _torch("lstm", 2, True, False)
    mapping = migrate.name_mapping(net, model, _shape_dtype(False)[0])
    for name, p in net.collect_params().items():
        p.lr_mult = 0.5 if "_h2h_" in name else 1.0
    settings = R.settings_of(net, "sgd", {"learning_rate": 0.1, "wd": 0.0, "momentum": 0.9}, None)
    groups = migrate.param_groups(model, settings, mapping)
    names = {id(p): k for k, p in model.named_parameters()}
    lr_of = {names[id(p)]: g["lr"] for g in groups for p in g["params"]}
    assert set(lr_of) == set(names.values()) and len(lr_of) == 16
    assert {k: lr for k, lr in lr_of.items()} == {k: 0.05 if "_hh_" in k else 0.1 for k in lr_of}
