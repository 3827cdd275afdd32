"""Layer-wise decay and discriminative multipliers: depth from the block tree, checked against known structures."""
import mxnet as mx
import pytest
from mxnet.gluon import nn
from mxnet.gluon.model_zoo import vision

from gluon_lr import (LrTrainer, MultiplierError, ParamsTypeError, Rule, RuleMatchError, discriminative, even_mults,
                      layer_decay, layer_groups)


class ResUnit(nn.HybridBlock):
    """conv-bn-relu-conv-bn plus the identity."""

    def __init__(self, channels, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.body = nn.HybridSequential()
            self.body.add(nn.Conv2D(channels, 3, padding=1, in_channels=channels), nn.BatchNorm(in_channels=channels),
                          nn.Activation("relu"), nn.Conv2D(channels, 3, padding=1, in_channels=channels),
                          nn.BatchNorm(in_channels=channels))

    def hybrid_forward(self, F, x):
        return F.relu(self.body(x) + x)


def residual_cnn():
    """stem (conv, bn) -> a stage of 3 ResUnits -> pool -> Dense head; depths 0, 1..3, 4."""
    net = nn.HybridSequential(prefix="cnn_")
    with net.name_scope():
        stage = nn.HybridSequential()
        stage.add(*[ResUnit(4) for _ in range(3)])
        net.add(nn.Conv2D(4, 3, padding=1, in_channels=2), nn.BatchNorm(in_channels=4), nn.Activation("relu"),
                stage, nn.GlobalAvgPool2D(), nn.Dense(5, in_units=4))
    return net


class TransformerBlock(nn.HybridBlock):
    """Pre-norm attention-like and MLP sub-blocks with residuals (Dense layers stand in for attention)."""

    def __init__(self, dim, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.norm1, self.norm2 = nn.LayerNorm(in_channels=dim), nn.LayerNorm(in_channels=dim)
            self.qkv, self.proj = nn.Dense(3 * dim, in_units=dim, flatten=False), nn.Dense(dim, in_units=3 * dim,
                                                                                         flatten=False)
            self.mlp = nn.HybridSequential()
            self.mlp.add(nn.Dense(2 * dim, in_units=dim, flatten=False, activation="relu"),
                         nn.Dense(dim, in_units=2 * dim, flatten=False))

    def hybrid_forward(self, F, x):
        x = x + self.proj(self.qkv(self.norm1(x)))
        return x + self.mlp(self.norm2(x))


class Transformer(nn.HybridBlock):
    """embed -> 4 blocks -> final norm -> head; depths 0, 1..4, (norm with block 4), 5."""

    def __init__(self, dim=4, depth=4, as_attributes=False, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embed = nn.Dense(dim, in_units=3, flatten=False)
            if as_attributes:  # blocks registered one by one, no Sequential
                self.layers = [TransformerBlock(dim) for _ in range(depth)]
                for i, block in enumerate(self.layers):
                    self.register_child(block, f"block{i}")
            else:
                self.blocks = nn.HybridSequential()
                self.blocks.add(*[TransformerBlock(dim) for _ in range(depth)])
            self.norm = nn.LayerNorm(in_channels=dim)
            self.head = nn.Dense(2, in_units=dim)

    def hybrid_forward(self, F, x):
        x = self.embed(x)
        for block in self._children.values():
            if isinstance(block, (TransformerBlock, nn.HybridSequential)):
                x = block(x)
        return self.head(self.norm(x))


def truth(net):
    """Known depth of every parameter name, from how each test network is built."""
    depth = {}

    def mark(block, d):
        for name in block.collect_params().keys():
            depth.setdefault(name, d)

    if isinstance(net, vision.ResNetV1):  # stem, then every residual unit of the 4 stages, then the output
        mark(net.features[0], 0), mark(net.features[1], 0)
        units = [unit for stage in list(net.features)[4:8] for unit in stage]
        for i, unit in enumerate(units):
            mark(unit, i + 1)
        mark(net.output, len(units) + 1)
    elif isinstance(net, Transformer):
        mark(net.embed, 0)
        blocks = list(net.blocks) if hasattr(net, "blocks") else net.layers
        for i, block in enumerate(blocks):
            mark(block, i + 1)
        mark(net.norm, len(blocks)), mark(net.head, len(blocks) + 1)
    elif net.prefix == "cnn_":
        mark(net[0], 0), mark(net[1], 0)
        for i, unit in enumerate(net[3]):
            mark(unit, i + 1)
        mark(net[5], 4)
    else:  # a plain stack of Dense layers
        for i, layer in enumerate(net):
            mark(layer, i)
    return depth


NETWORKS = {
    "resnet18_v1": lambda: vision.resnet18_v1(classes=10),
    "residual_cnn": residual_cnn,
    "transformer": lambda: Transformer(prefix="tf_"),
    "transformer_attributes": lambda: Transformer(as_attributes=True, prefix="ta_"),
    "dense_stack": lambda: _dense_stack(),
}


def _dense_stack():
    """Four Dense layers in a HybridSequential."""
    net = nn.HybridSequential(prefix="mlp_")
    with net.name_scope():
        net.add(nn.Dense(8, in_units=3, activation="relu"), nn.Dense(8, in_units=8, activation="relu"),
                nn.Dense(8, in_units=8, activation="relu"), nn.Dense(2, in_units=8))
    return net


class TestLayerDecay:
    """layer_decay(net, decay): the layer at depth d gets decay ** (depth_max - d), the head 1.0."""

    @pytest.mark.parametrize("kind", list(NETWORKS))
    def test_multipliers_follow_depth(self, kind):
        """Every parameter's resolved lr_mult equals decay ** (depth_max - true depth)."""
        net = NETWORKS[kind]()
        net.initialize()
        want = truth(net)
        top = max(want.values())
        trainer = LrTrainer(net, "sgd", {"learning_rate": 0.1}, rules=layer_decay(net, 0.5), kvstore=None)
        rows = trainer.explain().to_dict()
        wrong = {name: (trainer.lr_mult[name], 0.5 ** (top - d)) for name, d in want.items()
                 if trainer.lr_mult[name] != pytest.approx(0.5 ** (top - d), rel=1e-12) or rows[name]["depth"] != d}
        assert not wrong, f"{kind}: {len(wrong)} parameters off (got, want): {dict(list(wrong.items())[:4])}"
        head = [name for name, d in want.items() if d == top]
        assert all(trainer.lr_mult[name] == 1.0 for name in head) and head

    def test_depth_does_not_depend_on_names(self):
        """The same structure under other prefixes gives the same depths, layer by layer."""
        first, second = Transformer(prefix="aaa_"), Transformer(prefix="zz9_")
        depths = [[r.depth for r in layer_decay(net, 0.7)] for net in (first, second)]
        layers = [[r.layer for r in layer_decay(net, 0.7)] for net in (first, second)]
        assert depths[0] == depths[1] == [0, 1, 2, 3, 4, 5] and layers[0] == layers[1]
        assert layers[0][4] == "blocks.3+norm" and layers[0][5] == "head"

    def test_later_rules_and_explicit_calls_override(self):
        """A rule after the decay rules wins (precedence of LrTrainer); the explain label names the depth."""
        net = _dense_stack()
        net.initialize()
        rules = layer_decay(net, 0.5) + [Rule("mlp_dense0_bias", lr_mult=3.0)]
        trainer = LrTrainer(net, "sgd", {"learning_rate": 0.1}, rules=rules, kvstore=None)
        assert trainer.lr_mult["mlp_dense0_bias"] == 3.0 and trainer.lr_mult["mlp_dense0_weight"] == 0.125
        assert trainer.explain().to_dict()["mlp_dense1_weight"]["lr_source"] == "rules[1] depth 1 1"

    def test_groups_of_resnet50(self):
        """resnet50_v1: stem, 16 bottleneck units, output: 18 groups."""
        sizes = [len(group) for group in layer_groups(vision.resnet50_v1())]
        assert sizes == [2] + [1] * 16 + [1]


class TestDiscriminative:
    """discriminative(net, lo, hi, n): fastai's slice(lo, hi) over n layer groups."""

    def test_even_mults(self):
        """Geometric spacing from lo to hi, as fastai's even_mults."""
        assert even_mults(0.01, 1.0, 3) == pytest.approx([0.01, 0.1, 1.0], rel=1e-12)
        assert even_mults(1e-4, 1e-2, 5) == pytest.approx([1e-4, 10 ** -3.5, 1e-3, 10 ** -2.5, 1e-2], rel=1e-12)
        assert even_mults(0.1, 1.0, 1) == [1.0]

    def test_three_groups_on_resnet18(self):
        """Body split in two contiguous halves at lo and sqrt(lo*hi), the head alone at hi."""
        net = vision.resnet18_v1(classes=10)
        net.initialize()
        trainer = LrTrainer(net, "sgd", {"learning_rate": 0.1}, rules=discriminative(net, 0.01, 1.0, 3),
                            kvstore=None)
        depth = truth(net)  # 0 stem, 1..8 units, 9 output: body groups [0..3] and [4..8]
        for name, d in depth.items():
            want = 1.0 if d == 9 else (0.1 if d >= 4 else 0.01)
            assert trainer.lr_mult[name] == pytest.approx(want, rel=1e-12), f"{name} (depth {d})"


ERRORS = [
    ("net given as a ParameterDict", lambda: layer_decay(_dense_stack().collect_params(), 0.5), ParamsTypeError,
     r"network as a Block.*not net.collect_params"),
    ("decay of zero", lambda: layer_decay(_dense_stack(), 0.0), MultiplierError, r"decay must be a number in \(0, 1\]"),
    ("decay above one", lambda: layer_decay(_dense_stack(), 1.5), MultiplierError, r"got 1.5"),
    ("decay not a number", lambda: layer_decay(_dense_stack(), "0.5"), MultiplierError, r"got '0.5'"),
    ("lo of zero", lambda: discriminative(_dense_stack(), 0.0, 1.0), MultiplierError, r"lo must be a finite number"),
    ("too many groups", lambda: discriminative(_dense_stack(), 0.1, 1.0, 9), RuleMatchError,
     r"from 1 to the number of layer groups .* \(4\), got 9"),
    ("network without layers", lambda: layer_decay(nn.HybridSequential(prefix="empty_"), 0.5), RuleMatchError,
     r"'empty' has no layer with parameters"),
    ("n of zero", lambda: even_mults(0.1, 1.0, 0), MultiplierError, r"n must be an int >= 1"),
]


class TestErrors:
    """Bad input raises the project's own errors with the object, the expectation and the fix."""

    @pytest.mark.parametrize("description,call,error,pattern", ERRORS, ids=[e[0] for e in ERRORS])
    def test_error(self, description, call, error, pattern):
        """Each bad input raises its error class with a helpful message."""
        with pytest.raises(error, match=pattern):
            call()
