"""GluonNLP BERT (small, random init) against HF transformers.BertModel of the same configuration."""
import copy
import re

import numpy as np
import pytest

import migrate

gluonnlp = pytest.importorskip("gluonnlp")
transformers = pytest.importorskip("transformers")

UNITS, HIDDEN, LAYERS, HEADS, VOCAB, TYPES, MAX_LEN = 64, 128, 2, 4, 50, 2, 16
SHAPES, DTYPES = [(2, 8), (2, 8)], [np.int64, np.int64]


def _gluon_bert(seed=0, eps=1e-12):
    import mxnet as mx
    from gluonnlp.model.bert import BERTEncoder, BERTModel
    mx.random.seed(seed)
    encoder = BERTEncoder(num_layers=LAYERS, units=UNITS, hidden_size=HIDDEN, max_length=MAX_LEN, num_heads=HEADS,
                          dropout=0.0, layer_norm_eps=eps)
    net = BERTModel(encoder, vocab_size=VOCAB, token_type_vocab_size=TYPES, units=UNITS, embed_size=UNITS,
                    use_pooler=True, use_decoder=False, use_classifier=False)
    net.initialize(mx.init.Normal(0.2))
    for name, p in net.collect_params().items():  # LayerNorm gamma/beta away from 1/0 so a swap would show
        if name.endswith(("gamma", "beta")):
            p.set_data(mx.nd.random.uniform(0.5, 1.5, p.shape) if name.endswith("gamma") else
                       mx.nd.random.uniform(-0.5, 0.5, p.shape))
    return net


def _hf_bert(act="gelu", eps=1e-12):
    import torch
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=UNITS, num_hidden_layers=LAYERS,
                                     num_attention_heads=HEADS, intermediate_size=HIDDEN,
                                     max_position_embeddings=MAX_LEN, type_vocab_size=TYPES, hidden_act=act,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=eps)

    class Bert(torch.nn.Module):
        """BertModel called as GluonNLP's BERTModel is: (token ids, token types) -> (sequence, pooled)."""

        def __init__(self):
            super().__init__()
            self.bert = transformers.BertModel(config, add_pooling_layer=True)

        def forward(self, ids, types):
            out = self.bert(input_ids=ids, token_type_ids=types)
            return out.last_hidden_state, out.pooler_output

    torch.manual_seed(1)
    return Bert()


_HF = [(r"position_weight$", "embeddings.position_embeddings.weight"),
       (r"token_type_embed_embedding0_weight$", "embeddings.token_type_embeddings.weight"),
       (r"word_embed_embedding0_weight$", "embeddings.word_embeddings.weight"),
       (r"encoder\d+_layernorm0_(gamma|beta)$", "embeddings.LayerNorm.{ln}"),
       (r"transformer(\d+)_dotproductselfattentioncell0_(query|key|value)_(weight|bias)$",
        "encoder.layer.{0}.attention.self.{1}.{2}"),
       (r"transformer(\d+)_proj_(weight|bias)$", "encoder.layer.{0}.attention.output.dense.{1}"),
       (r"transformer(\d+)_layernorm0_(gamma|beta)$", "encoder.layer.{0}.attention.output.LayerNorm.{ln}"),
       (r"transformer(\d+)_positionwiseffn0_ffn_1_(weight|bias)$", "encoder.layer.{0}.intermediate.dense.{1}"),
       (r"transformer(\d+)_positionwiseffn0_ffn_2_(weight|bias)$", "encoder.layer.{0}.output.dense.{1}"),
       (r"transformer(\d+)_positionwiseffn0_layernorm0_(gamma|beta)$", "encoder.layer.{0}.output.LayerNorm.{ln}"),
       (r"pooler_(weight|bias)$", "pooler.dense.{0}")]


def _truth(mx_name: str) -> str:
    """The HF key of a GluonNLP BERT parameter, written by hand from the two models' documentation."""
    for pattern, key in _HF:
        found = re.search(pattern, mx_name)
        if found:
            groups = found.groups()
            ln = {"gamma": "weight", "beta": "bias"}.get(groups[-1] if groups else "", "")
            return "bert." + key.format(*groups, ln=ln)
    raise AssertionError(f"no hand-written HF name for {mx_name}")


@pytest.fixture(scope="module")
def bert_pair():
    net, model = _gluon_bert(), _hf_bert()
    return net, model, migrate.name_mapping(net, model, SHAPES, input_dtypes=DTYPES)


class TestBert:
    def test_every_name_matches_the_hand_map(self, bert_pair):
        """All 39 tensors map one-to-one to HF's keys, with no layout change, and nothing is left over."""
        net, model, mapping = bert_pair
        assert mapping.ok, mapping.differences
        names = set(net.collect_params())
        assert len(names) == len(model.state_dict()) == 39
        assert {k: mapping[k] for k in mapping} == {k: _truth(k) for k in names}
        assert all(mapping.entry(k)["steps"] == [] for k in mapping)

    def test_outputs_equal_after_copying(self, bert_pair):
        """Sequence and pooled outputs of the copied HF model equal GluonNLP's within 2e-5 (float32)."""
        import mxnet as mx
        import torch
        net, model, mapping = bert_pair
        model.load_state_dict(migrate.convert_weights({k: p.data() for k, p in net.collect_params().items()},
                                                      mapping, model))
        rng = np.random.default_rng(0)
        ids, types = rng.integers(0, VOCAB, SHAPES[0]), rng.integers(0, TYPES, SHAPES[1])
        want = [o.asnumpy() for o in net(mx.nd.array(ids), mx.nd.array(types))]
        with torch.no_grad():
            got = [o.numpy() for o in model.eval()(torch.from_numpy(ids), torch.from_numpy(types))]
        for w, g in zip(want, got):
            assert w.shape == g.shape and np.abs(w).max() > 0.1
            np.testing.assert_allclose(g, w, rtol=0, atol=2e-5)

    def test_verify_passes(self, bert_pair):
        """migrate.verify with integer inputs compares every matched node, none skipped: the query, key and value
        weights and biases GluonNLP packs into one FullyConnected as their slices of its output (6 rows per layer)."""
        net, model, mapping = bert_pair
        report = migrate.verify(net, model, mapping, SHAPES, input_dtypes=DTYPES, atol=2e-5)
        assert report.verified and report.max_abs_diff < 2e-5 and not report.skipped
        packed = [r.torch_node for r in report.rows if "dotproductselfattentioncell0_reshape" in r.mx_node]
        assert sorted(packed) == sorted(f"bert.encoder.layer.{i}.attention.self.{p}" for i in range(LAYERS)
                                        for p in ("query", "key", "value") for _ in ("weight", "bias"))
        assert len(report.rows) == 3 + 1 + 5 * LAYERS + 1 + 6 * LAYERS  # embeddings, LayerNorms, dense, pooler, q/k/v
        assert all(r.max_abs_diff is not None and r.max_abs_diff < 2e-5 for r in report.rows)

    def test_a_wrong_value_projection_diverges_at_its_node(self, bert_pair):
        """A twin whose layer-1 value projection adds 0.5 to its output first diverges at that value node (compared
        as its slice of MXNet's packed output), by 0.5; the query and key nodes of layer 1 still pass."""
        net, model, mapping = bert_pair
        wrong = copy.deepcopy(model)
        wrong.bert.encoder.layer[1].attention.self.value.register_forward_hook(lambda _m, _i, out: out + 0.5)
        report = migrate.verify(net, wrong, mapping, SHAPES, input_dtypes=DTYPES, atol=2e-5)
        first = report.first_divergence
        assert not report.ok and first.torch_node == "bert.encoder.layer.1.attention.self.value"
        assert abs(first.max_abs_diff - 0.5) < 1e-4
        layer1 = [r for r in report.rows if r.torch_node.startswith("bert.encoder.layer.1.attention.self.")]
        assert [r.ok for r in layer1 if not r.torch_node.endswith("value")] == [True] * 4


class TestBertDifferences:
    def test_gelu_vs_relu(self):
        """HF with hidden_act='relu': each intermediate dense is reported, Gelu on the MXNet side, Relu on torch's."""
        net = _gluon_bert()
        mapping = migrate.name_mapping(net, _hf_bert(act="relu"), SHAPES, input_dtypes=DTYPES)
        assert not mapping.ok
        want = [f"MXNet Gemm '{net.encoder.prefix}transformer{i}_positionwiseffn0_ffn_1_weight' vs torch MatMul "
                f"'bert.encoder.layer.{i}.intermediate.dense.weight': activation after the node ['Gelu'] vs ['Relu']"
                for i in range(LAYERS)]
        assert mapping.differences == want

    def test_layer_norm_eps(self):
        """eps 1e-12 vs 1e-5: each of the 5 LayerNorms is reported with both values."""
        mapping = migrate.name_mapping(_gluon_bert(), _hf_bert(eps=1e-5), SHAPES, input_dtypes=DTYPES)
        eps = [d for d in mapping.differences if "epsilon" in d]
        assert len(eps) == 1 + 2 * LAYERS == len(mapping.differences)
        assert all(re.search(r"LayerNormalization '.*gamma' vs torch LayerNormalization '.*LayerNorm.weight': "
                             r"epsilon 1e-12 vs 1e-05", d) for d in eps), eps
