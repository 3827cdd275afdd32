"""The installed GluonCV and GluonNLP model zoos as the zoo report and the generation bench use them.

``gluoncv_zoo()`` imports ``gluoncv.model_zoo`` without ``gluoncv/__init__.py`` (which refuses torch >= 2);
``entries()`` lists every zoo model with the inputs it is tried on (small images or short sequences, tried in
order until MXNet accepts one); ``build(entry)`` makes the network with random weights (``pretrained=False``,
``pretrained_base=False``; BatchNorm statistics and affine terms moved away from identity) and its inputs;
``check(net, inputs, path)`` generates the torch module and compares its eval-mode outputs with MXNet's.
"""
import importlib.util
import os
import re
import sys
import tempfile
import time
import types
from typing import Callable, NamedTuple

import numpy as np

TOL = 1e-4  # largest |torch - mxnet| over max(1, largest |mxnet|), per output, eval mode

_DEFAULT = [(1, 3, 64, 64), (1, 3, 128, 128), (1, 3, 224, 224), (1, 3, 299, 299)]
_SHAPES = [  # (name pattern, candidate input shapes), first match wins
    (r"^cifar_", [(2, 3, 32, 32)]),
    (r"^ssd_", [(1, 3, 128, 128), (1, 3, 256, 256), (1, 3, 300, 300), (1, 3, 512, 512)]),
    (r"^yolo3_", [(1, 3, 128, 128)]),
    (r"rcnn", [(1, 3, 128, 128), (1, 3, 256, 256)]),
    (r"^center_net_", [(1, 3, 128, 128)]),
    (r"^(fcn|psp|deeplab|icnet|fastscnn|danet)_", [(1, 3, 64, 64)]),  # built with crop_size 64
    (r"pose", [(1, 3, 64, 48), (1, 3, 128, 96), (1, 3, 256, 192)]),
    (r"^monodepth2_.*posenet", [(1, 6, 64, 192), (1, 6, 192, 640)]),
    (r"^monodepth2_", [(1, 3, 64, 192), (1, 3, 192, 640)]),
    (r"(i3d|slowfast|r2plus1d|c3d|p3d)", [(1, 3, 8, 64, 64), (1, 3, 16, 112, 112), (1, 3, 32, 112, 112),
                                          (1, 3, 32, 224, 224), (1, 3, 64, 224, 224)]),
    (r"(kinetics|ucf101|hmdb51|sthsthv2|_custom$)", [(1, 3, 64, 64), (1, 3, 224, 224)]),
]


_SEGMENTATION = r"^(fcn|psp|deeplab|icnet|fastscnn|danet)_"


class Entry(NamedTuple):
    """One zoo model: its name, its zoo, and a builder ``() -> (net, [candidate input lists])``."""

    name: str
    zoo: str
    make: Callable


def gluoncv_zoo():
    """``gluoncv.model_zoo``, imported without gluoncv's torch version check; scipy and portalocker (absent here,
    unused by the model definitions) stubbed while importing."""
    if "gluoncv.model_zoo" in sys.modules:
        return sys.modules["gluoncv.model_zoo"]
    spec = importlib.util.find_spec("gluoncv")
    if spec is None:
        return None
    pkg = types.ModuleType("gluoncv")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules.setdefault("gluoncv", pkg)
    stubs = [k for k in ("scipy", "scipy.io", "portalocker") if importlib.util.find_spec(k.split(".")[0]) is None]
    for name in stubs:
        sys.modules[name] = types.ModuleType(name)
    try:
        import gluoncv.model_zoo as zoo
    finally:
        for name in stubs:
            del sys.modules[name]
    return zoo


def _images(shape, seed=0):
    return [np.random.RandomState(seed).uniform(-1, 1, shape).astype(np.float32)]


def _gluoncv_entry(zoo, name) -> Entry:
    def make():
        extra = {"classes": ["a", "b", "c"]} if name.endswith("_custom") or name.startswith("custom_") else {}
        if re.match(_SEGMENTATION, name):  # their pyramid pooling and upsampling sizes follow crop_size
            extra.update(crop_size=64, base_size=72)
        try:
            net = zoo.get_model(name, pretrained=False, pretrained_base=False, **extra)
        except TypeError:
            net = zoo.get_model(name, pretrained=False, **extra)
        _fewer_proposals(net)
        shapes = next((s for pattern, s in _SHAPES if re.search(pattern, name)), _DEFAULT)
        if name.startswith("siamrpn"):
            return net, [_images((1, 3, 127, 127)) + _images((1, 3, 255, 255), seed=1)]
        return net, [_images(s) for s in shapes]
    return Entry(name, "gluoncv", make)


RCNN_PROPOSALS = 100


def _fewer_proposals(net) -> None:
    """R-CNN models: RCNN_PROPOSALS proposals and at most as many detections and masks (their test defaults, 300
    proposals and 1000 masks, run the last ResNet stage or the mask head on each: over 11 GB for Mask R-CNN C4).
    Set before the first forward, which reads them."""
    if hasattr(net, "_rpn_test_post_nms") and hasattr(net, "rpn"):
        net._rpn_test_post_nms = net.rpn._test_post_nms = min(net._rpn_test_post_nms, RCNN_PROPOSALS)
    if hasattr(net, "_rcnn_max_dets"):
        net._rcnn_max_dets = min(net._rcnn_max_dets, RCNN_PROPOSALS)


def _nlp_entries() -> list:
    """GluonNLP's zoo: BERT-family encoders (random init, ids and valid lengths as inputs), the en-de transformer's
    encoder and decoder (one step over a memory), the LSTM language models (initial states as inputs), ELMo."""
    if importlib.util.find_spec("gluonnlp") is None:
        return []
    out = []
    for name in ("bert_12_768_12", "bert_24_1024_16", "roberta_12_768_12", "roberta_24_1024_16",
                 "distilbert_6_768_12", "ernie_12_768_12"):
        out.append(Entry(name, "gluonnlp", lambda name=name: _bert(name)))
    out += [Entry("transformer_en_de_512 (encoder)", "gluonnlp", lambda: _transformer(True)),
            Entry("transformer_en_de_512 (decoder)", "gluonnlp", lambda: _transformer(False))]
    for name in ("standard_lstm_lm_200", "standard_lstm_lm_650", "standard_lstm_lm_1500", "awd_lstm_lm_600",
                 "awd_lstm_lm_1150", "big_rnn_lm_2048_512"):
        out.append(Entry(name, "gluonnlp", lambda name=name: _language_model(name)))
    for name in ("elmo_2x1024_128_2048cnn_1xhighway", "elmo_2x2048_256_2048cnn_1xhighway",
                 "elmo_2x4096_512_2048cnn_2xhighway"):
        out.append(Entry(name, "gluonnlp", lambda name=name: _elmo(name)))
    return out


def _vocab(bert: bool):
    import gluonnlp as nlp
    counter = nlp.data.count_tokens([f"w{i}" for i in range(40)])
    return nlp.vocab.BERTVocab(counter) if bert else nlp.Vocab(counter)


def _bert(name):
    import gluonnlp as nlp
    kwargs = {"dataset_name": None, "pretrained": False, "vocab": _vocab(not name.startswith("roberta"))}
    if not name.startswith("distilbert"):
        kwargs.update(use_decoder=False, use_classifier=False)
    net = nlp.model.get_model(name, **kwargs)[0]
    rng = np.random.RandomState(0)
    tokens = rng.randint(0, 40, (2, 8)).astype(np.float32)
    lengths = np.array([8, 5], np.float32)
    if name.startswith(("roberta", "distilbert")):
        return net, [[tokens, lengths]]
    return net, [[tokens, (rng.uniform(0, 1, (2, 8)) > 0.5).astype(np.float32), lengths]]


def _transformer(encoder: bool):
    import mxnet as mx
    from gluonnlp.model.transformer import get_transformer_encoder_decoder
    enc, dec, _ = get_transformer_encoder_decoder(num_layers=6, num_heads=8, units=512, hidden_size=2048,
                                                  max_src_length=64, max_tgt_length=64, scaled=True, dropout=0.0)
    rng = np.random.RandomState(0)
    x = rng.uniform(-1, 1, (2, 6, 512)).astype(np.float32)
    lengths = np.array([6, 4], np.float32)
    if encoder:
        class Encoder(mx.gluon.HybridBlock):
            def __init__(self):
                super().__init__(prefix="enc_")
                self.encoder = enc

            def hybrid_forward(self, F, inputs, valid_length):
                return self.encoder(inputs, None, valid_length)[0]
        return Encoder(), [[x, lengths]]

    class Decoder(mx.gluon.HybridBlock):
        def __init__(self):
            super().__init__(prefix="dec_")
            self.decoder = dec

        def hybrid_forward(self, F, inputs, memory, memory_length):  # the mask init_state_from_encoder makes
            steps = F.contrib.arange_like(memory, axis=1).reshape((1, -1))
            mask = F.broadcast_lesser(steps, memory_length.reshape((-1, 1)))
            return self.decoder(inputs, [memory, mask], None)[0]
    return Decoder(), [[rng.uniform(-1, 1, (2, 5, 512)).astype(np.float32), x, lengths]]


def _language_model(name):
    """A language model with its initial states as inputs (h, c per layer), returning the next-token scores: a
    HybridBlock around the HybridBlock LMs, a plain Block around BigRNN (a plain Block: recorded while it runs)."""
    import gluonnlp as nlp
    import mxnet as mx
    model = nlp.model.get_model(name, vocab=_vocab(False), dataset_name=None, pretrained=False)[0]
    model.initialize()
    states = model.begin_state(batch_size=2, func=mx.nd.zeros)
    flat = [s for layer in states for s in (layer if isinstance(layer, (list, tuple)) else [layer])]

    def scores(tokens, flat_states):
        nested, i = [], 0
        for layer in states:
            n = len(layer) if isinstance(layer, (list, tuple)) else 1
            nested.append(list(flat_states[i:i + n]) if n > 1 else flat_states[i])
            i += n
        return model(tokens, nested)[0]

    if isinstance(model, mx.gluon.HybridBlock):
        class LanguageModel(mx.gluon.HybridBlock):
            def __init__(self):
                super().__init__(prefix="lm_")
                self.lm = model

            def hybrid_forward(self, F, tokens, *flat_states):
                return scores(tokens, flat_states)
    else:
        class LanguageModel(mx.gluon.Block):
            def __init__(self):
                super().__init__(prefix="lm_")
                self.lm = model

            def forward(self, tokens, *flat_states):
                return scores(tokens, flat_states)
    rng = np.random.RandomState(0)
    inputs = [rng.randint(0, 40, (5, 2)).astype(np.float32)] + [rng.uniform(-1, 1, s.shape).astype(np.float32)
                                                                 for s in flat]
    return LanguageModel(), [inputs]


def _elmo(name):
    import gluonnlp as nlp
    import mxnet as mx
    elmo = nlp.model.get_model(name, dataset_name=None, pretrained=False)
    elmo = elmo[0] if isinstance(elmo, tuple) else elmo
    elmo.initialize()
    states = elmo.begin_state(mx.nd.zeros, batch_size=2)
    flat = [s for direction in states for layer in direction for s in layer]

    class Elmo(mx.gluon.HybridBlock):
        """ELMo with its LSTM states as inputs (per direction, per layer: h, c)."""

        def __init__(self):
            super().__init__(prefix="elmo_")
            self.elmo = elmo

        def hybrid_forward(self, F, chars, *flat_states):
            it = iter(flat_states)
            nested = [[[next(it), next(it)] for _ in direction] for direction in states]
            return self.elmo(chars, nested)[0]
    rng = np.random.RandomState(0)
    return Elmo(), [[rng.randint(0, 50, (2, 4, 50)).astype(np.float32)] + [np.zeros(s.shape, np.float32)
                                                                            for s in flat]]


def entries(zoo=None) -> list:
    """Every model of the installed GluonCV and GluonNLP zoos, GluonCV's in its ``get_model_list`` order."""
    zoo = zoo or gluoncv_zoo()
    cv = [_gluoncv_entry(zoo, name) for name in zoo.get_model_list()] if zoo is not None else []
    return cv + _nlp_entries()


def initialize(net, rnd_type: str = "gaussian") -> None:
    """Xavier weights (``rnd_type`` 'gaussian' or 'uniform', magnitude 2), seeded. Parameters of symbol-built parts
    (GluonCV's SSD/FPN feature expanders are SymbolBlocks) have no initializer of their own, and MXNet would give
    them Xavier, which refuses vectors: their BatchNorm terms and biases get ones and zeros first."""
    import mxnet as mx
    for name, p in net.collect_params().items():
        if p.init is None and name.endswith(("gamma", "running_var", "moving_var")):
            p.init = mx.init.One()
        elif p.init is None and name.endswith(("beta", "bias", "running_mean", "moving_mean")):
            p.init = mx.init.Zero()
    mx.random.seed(0)
    net.initialize(mx.init.Xavier(rnd_type=rnd_type, magnitude=2))


def _perturb(net) -> None:
    """BatchNorm/LayerNorm terms away from identity (random init leaves them 1 and 0, which hides swaps)."""
    import mxnet as mx
    rng = np.random.RandomState(0)
    for pname, p in net.collect_params().items():
        if pname.endswith(("gamma", "running_var", "moving_var")):
            p.set_data(mx.nd.array(rng.uniform(0.5, 1.5, p.shape), dtype=p.dtype))
        elif pname.endswith(("beta", "running_mean", "moving_mean")):
            p.set_data(mx.nd.array(rng.uniform(-0.2, 0.2, p.shape), dtype=p.dtype))


def _flat(out) -> list:
    if isinstance(out, (list, tuple)):
        return [leaf for item in out for leaf in _flat(item)]
    return [out]


def build(entry: Entry, given: list = None, rnd_type: str = "gaussian"):
    """``(net, inputs, mxnet outputs)`` with random weights (``initialize``'s Xavier ``rnd_type``), on the first
    candidate input MXNet accepts, or on the inputs ``given`` (a list of arrays).

    Raises:
        RuntimeError: no candidate input works (the last MXNet error, first line).
    """
    import mxnet as mx
    net, candidates = entry.make()
    candidates = candidates if given is None else [given]
    last = None
    for k, inputs in enumerate(candidates):
        if k:  # a failed forward can leave deferred initialization half done: start from a fresh network
            net = entry.make()[0]
        initialize(net, rnd_type)
        try:
            net(*[mx.nd.array(x) for x in inputs])
        except Exception as exc:  # MXNet rejects the shape: try the next candidate
            last = exc
            continue
        _perturb(net)
        return net, inputs, [o.asnumpy() for o in _flat(net(*[mx.nd.array(x) for x in inputs]))]
    raise RuntimeError(f"MXNet runs no candidate input: {error_line(last)}")


def error_line(exc) -> str:
    """The informative line of an exception (MXNet's messages start with a traceback header)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("Traceback", "File ", "[bt]", "Stack trace"))]
    return (useful[-1] if useful else lines[0] if lines else type(exc).__name__)[:160]


def relative_difference(want: list, got: list) -> float:
    """Largest |torch - mxnet| over max(1, largest |mxnet|), over all outputs (inf if shapes differ)."""
    if len(want) != len(got):
        return float("inf")
    worst = 0.0
    for w, g in zip(want, got):
        if w.shape != g.shape:
            return float("inf")
        if w.size:
            scale = max(1.0, float(np.abs(w.astype(np.float64)).max()))
            worst = max(worst, float(np.abs(w.astype(np.float64) - g.astype(np.float64)).max()) / scale)
    return worst


def _float64_difference(net, model, inputs) -> float:
    """Relative difference of MXNet and the generated module both run in float64 (inf if either cannot): the
    translation's own error, with float32 rounding out of the way."""
    import mxnet as mx
    import torch
    try:
        net.cast("float64")
        want = [o.asnumpy() for o in _flat(net(*[mx.nd.array(x, dtype="float64") if x.dtype.kind == "f" else
                                                 mx.nd.array(x) for x in inputs]))]
        with torch.no_grad():
            got = [o.numpy() for o in _flat(model.double()(*[torch.from_numpy(x).double() if x.dtype.kind == "f"
                                                              else torch.from_numpy(x) for x in inputs]))]
    except Exception:  # a float32 constant inside the graph or a float32-only kernel: no float64 run
        _flush_engine()
        net.cast("float32")  # the weights go back to float32, exactly
        _flush_engine()
        return float("inf")
    return relative_difference(want, got)


_FLOAT32_BY_DEFAULT = {op: "float32" for op in ("argsort", "topk", "_arange", "_zeros", "_ones", "_full", "_linspace",
                                                 "_eye", "one_hot")}  # ops whose dtype attribute defaults to it


def _float64_symbol(symbol) -> tuple:
    """(``symbol`` with every float32 ``dtype`` attribute and variable dtype made float64, how many ops changed)."""
    import json
    import mxnet as mx
    graph, made = json.loads(symbol.tojson()), 0
    for node in graph["nodes"]:
        attrs = node.get("attrs", {})
        if node["op"] != "null" and attrs.get("dtype", _FLOAT32_BY_DEFAULT.get(node["op"])) in ("float32",
                                                                                              "'float32'"):
            node["attrs"] = {**attrs, "dtype": "float64"}
            made += 1
        elif node["op"] == "null" and attrs.get("__dtype__") == "0":  # MXNet's type flag 0 is float32, 1 float64
            attrs["__dtype__"] = "1"
    return mx.sym.load_json(json.dumps(graph)), made


def _float64_graph_difference(net, inputs) -> tuple:
    """(relative difference, float32 constants made float64) of MXNet and the generated module both running the
    net's symbol graph in float64, for Blocks that MXNet cannot cast (a float32 constant such as the ``arange`` of
    R-CNN's ROI batch ids meets float64 data): every float32 ``dtype`` attribute and variable dtype in the graph
    becomes float64, and the module is generated from that graph. (inf, 0) if either cannot run it."""
    import mxnet as mx
    import torch

    from migrate.generate import generate_torch
    names, made = ["data"] if len(inputs) == 1 else [f"data{i}" for i in range(len(inputs))], 0
    data = {n: x.astype(np.float64) if x.dtype.kind == "f" else x for n, x in zip(names, inputs)}
    try:
        symbol = net(*[mx.sym.var(n) for n in names])
        symbol = mx.sym.Group(list(_flat(symbol))) if isinstance(symbol, (list, tuple)) else symbol
        symbol, made = _float64_symbol(symbol)
        params = {k: p.data().astype("float64") if np.dtype(p.dtype).kind == "f" else p.data()
                  for k, p in net.collect_params().items() if k in set(symbol.list_inputs())}
        args = {k: mx.nd.array(data[k], dtype=data[k].dtype) if k in data else params[k]
                for k in symbol.list_arguments()}
        aux = {k: params[k] for k in symbol.list_auxiliary_states()}
        want = [o.asnumpy() for o in symbol.bind(mx.cpu(), args, aux_states=aux).forward()]
        with tempfile.TemporaryDirectory() as folder:
            symbol.save(os.path.join(folder, "net-symbol.json"))
            mx.nd.save(os.path.join(folder, "net-0000.params"), params)
            model = generate_torch((os.path.join(folder, "net-symbol.json"), os.path.join(folder, "net-0000.params")),
                                   [x.shape for x in inputs], os.path.join(folder, "net.py"),
                                   input_dtypes=[data[n].dtype for n in names]).eval()
            with torch.no_grad():
                got = [o.numpy() for o in _flat(model(*[torch.from_numpy(data[n]) for n in names]))]
    except Exception:  # a float32-only kernel or an op the float64 graph cannot run: no such run
        _flush_engine()
        return float("inf"), made
    return relative_difference(want, got), made


def _flush_engine() -> None:
    """Raise and drop any error MXNet's asynchronous engine still holds (it would surface in a later op)."""
    import mxnet as mx
    try:
        mx.nd.waitall()
    except Exception:  # the failed float64 run's error, already handled
        pass


_SELECTIONS = ("_contrib_box_nms", "topk", "argsort", "sort", "_contrib_MultiBoxDetection")


def _selection_check(net, inputs):
    """Where the generated module's outputs part from MXNet's at a selection op (NMS, topk, sort): (op, relative
    difference of its input between MXNet and the module, relative difference of the op's translation run on
    MXNet's own input from MXNet's output). None when no selection op is where they part (none in the graph, or
    the outputs part before one or after the last). Small both: the outputs differ in which candidates, tied within
    float32 rounding, the selection keeps."""
    import json
    import mxnet as mx
    names = ["data"] if len(inputs) == 1 else [f"data{i}" for i in range(len(inputs))]
    symbol = net(*[mx.sym.var(n) for n in names])
    symbol = mx.sym.Group(list(_flat(symbol))) if isinstance(symbol, (list, tuple)) else symbol
    nodes = json.loads(symbol.tojson())["nodes"]
    internals, params = symbol.get_internals(), {k: p.data() for k, p in net.collect_params().items()}
    outputs, data = set(internals.list_outputs()), dict(zip(names, inputs))

    def first_output(name):
        return internals[f"{name}_output" if f"{name}_output" in outputs else f"{name}_output0"]
    for node in (n for n in nodes if n["op"] in _SELECTIONS):
        source = first_output(nodes[node["inputs"][0][0]]["name"])
        x_mx, y_mx = _run_mxnet(source, params, data), _run_mxnet(first_output(node["name"]), params, data)
        before = relative_difference([x_mx], [_run_generated(source, params, inputs)])
        if before > TOL:
            return None  # the outputs part before this selection
        if relative_difference([y_mx], [_run_generated(first_output(node["name"]), params, inputs)]) > TOL:
            return node["op"], before, _translation_on(node, x_mx, y_mx)
    return None


def _run_generated(part, params, inputs) -> np.ndarray:
    """First output of the generated module of MXNet graph ``part`` (written to a temporary folder)."""
    import mxnet as mx
    import torch

    from migrate.generate import generate_torch
    with tempfile.TemporaryDirectory() as folder:
        part.save(os.path.join(folder, "part-symbol.json"))
        used = {k: v for k, v in params.items() if k in set(part.list_inputs())}
        mx.nd.save(os.path.join(folder, "part-0000.params"), used or {"unused": mx.nd.zeros(1)})  # {} reads as []
        model = generate_torch((os.path.join(folder, "part-symbol.json"), os.path.join(folder, "part-0000.params")),
                               [x.shape for x in inputs], os.path.join(folder, "part.py")).eval()
        with torch.no_grad():
            return _flat(model(*[torch.from_numpy(x) for x in inputs]))[0].numpy()


def _translation_on(node, x_mx, y_mx) -> float:
    """Relative difference from MXNet's output ``y_mx`` of ``node``'s translation run on MXNet's input ``x_mx``."""
    import torch

    from migrate.generate import ops  # noqa: F401  (fills the registry)
    from migrate.generate.registry import OpNode, translator
    op = OpNode(node["op"], node["name"], node.get("attrs", {}), ["x"], [x_mx.shape], y_mx.shape)
    expression = translator(op.op, op.name)(op)
    with torch.no_grad():
        y = eval(expression, {**op.namespace(), "x": torch.from_numpy(x_mx)})
    return relative_difference([y_mx], [_flat(y)[0].numpy()])


def _run_mxnet(symbol, params, data) -> np.ndarray:
    import mxnet as mx
    aux = set(symbol.list_auxiliary_states())
    args = {k: (mx.nd.array(data[k]) if k in data else params[k]) for k in symbol.list_arguments()}
    return symbol.bind(mx.cpu(), args, aux_states={k: params[k] for k in aux}).forward()[0].asnumpy()


def mxnet_self_difference(net, inputs, want) -> float:
    """How far MXNet's own outputs move when every weight is multiplied by 1 + 1e-7 x noise (the control of the
    README's demo): what float32 rounding alone does to this model, seen from MXNet."""
    import mxnet as mx
    rng = np.random.RandomState(1)
    saved = {}
    for name, p in net.collect_params().items():
        if np.dtype(p.dtype).kind == "f":
            saved[name] = p.data().copy()
            p.set_data(p.data() * mx.nd.array(1 + 1e-7 * rng.standard_normal(p.shape), dtype=p.dtype))
    try:
        moved = [o.asnumpy() for o in _flat(net(*[mx.nd.array(x) for x in inputs]))]
    except Exception:  # MXNet cannot run it again: no control
        _flush_engine()
        moved = None
    finally:
        for name, value in saved.items():
            net.collect_params()[name].set_data(value)
    return 0.0 if moved is None else relative_difference(want, moved)


def _without_float64_cast(net, inputs, want, diff) -> dict:
    """Status and detail of a model outside TOL in float32 that MXNet cannot cast to float64: float32-limited
    when the first selection op parts the outputs on near ties, when MXNet itself moves by at least a third as
    much with its weights multiplied by 1 + 1e-7 x noise, or when MXNet and the module generated from the symbol
    graph with its float32 constants made float64 agree in float64; differs otherwise."""
    try:
        selection = _selection_check(net, inputs)
    except Exception:  # a part that does not generate or run alone: no such check
        _flush_engine()
        selection = None
    if selection is not None and selection[1] <= TOL and selection[2] <= TOL:
        op, before, on_mxnet = selection
        return {"status": "float32-limited",
                "detail": f"{diff:.2g} in float32; {op}'s input within {before:.2g} of MXNet's, and {op} run on "
                          f"MXNet's own input within {on_mxnet:.2g} of MXNet's output: it keeps other near-tie "
                          f"candidates"}
    own = mxnet_self_difference(net, inputs, want)  # MXNet cannot cast the Block to float64
    if diff <= 3 * own:
        return {"status": "float32-limited",
                "detail": f"{diff:.2g} in float32 (no float64 run: MXNet with weights x (1 + 1e-7 noise) moves "
                          f"{own:.2g})"}
    exact, made = _float64_graph_difference(net, inputs)
    if exact < float("inf"):
        return {"status": "float32-limited" if exact <= TOL else "differs",
                "detail": f"{diff:.2g} in float32, {exact:.2g} in float64 (the symbol graph run by both, its {made} "
                          f"float32 constants made float64; MXNet with weights x (1 + 1e-7 noise) moves {own:.2g})"}
    return {"status": "differs",
            "detail": f"{diff:.2g} in float32 (no float64 run: MXNet with weights x (1 + 1e-7 noise) moves {own:.2g})"}


def _generated(net, inputs, path) -> tuple:
    """(the module ``generate_torch`` writes for ``net``, None or what recording it says): a HybridBlock whose forward
    fails on symbols is recorded while it runs on ``inputs`` (``migrate.source.record_block``), as its error says;
    the recording's notes but the first and the constants' are kept, each to its first clause."""
    import mxnet as mx

    from migrate.errors import ModelTypeError
    from migrate.generate import generate_torch
    from migrate.source import record_block
    shapes, dtypes = [x.shape for x in inputs], [x.dtype for x in inputs]
    try:
        return generate_torch(net, shapes, path, input_dtypes=dtypes), None
    except ModelTypeError as exc:
        if "cannot be traced as a symbol graph" not in str(exc):
            raise
    source = record_block(net, [mx.nd.array(x, dtype=x.dtype) for x in inputs])
    said = [re.sub(r"/\S*/site-packages/", "", note.split(";")[0]) for note in source.notes[1:]
            if not note.startswith("constants:")]
    return generate_torch(source, shapes, path, input_dtypes=dtypes), ["the HybridBlock does not trace on symbols"] + said


def check(net, inputs, want, path) -> dict:
    """Generate ``net`` into ``path`` and compare its eval outputs with MXNet's ``want``: a dict with 'status',
    'detail', 'seconds' (generation) and 'lines' (source length). Status: match (within TOL), float32-limited
    (outside TOL in float32, within it with MXNet and the module both run in float64: the difference is float32
    rounding, which deep random-init networks amplify and which reorders detections whose scores tie within it;
    where MXNet cannot cast the Block to float64: the first selection op parts them on near ties, or MXNet
    itself, its weights multiplied by 1 + 1e-7 x noise, moves by at least a third as much, or else MXNet and a
    module generated from the symbol graph with its float32 constants made float64 agree in float64), differs,
    refused (the op is named), error."""
    import torch

    from migrate.errors import UnsupportedOpError
    start = time.perf_counter()
    try:
        model, recorded = _generated(net, inputs, path)
        seconds = time.perf_counter() - start
        model.eval()
        with torch.no_grad():
            got = [o.numpy() for o in _flat(model(*[torch.from_numpy(x) for x in inputs]))]
    except UnsupportedOpError as exc:
        op = re.search(r"uses op '([^']+)'", str(exc)) or re.search(r"\(op ([^)]+)\)", str(exc))
        return {"status": "refused", "detail": f"op {op.group(1) if op else '?'}: {str(exc)[:160]}"}
    except Exception as exc:  # report any other failure by type and first line
        return {"status": "error", "detail": f"{type(exc).__name__}: {error_line(exc)}"}
    row = {"seconds": seconds, "lines": len(open(path).read().splitlines()), **_compared(net, model, inputs, want, got)}
    if recorded is not None:
        row["detail"] += f" (recorded: {'; '.join(recorded)})"
    return row


def _compared(net, model, inputs, want, got) -> dict:
    """'status' and 'detail' of the generated ``model``'s outputs ``got`` against MXNet's ``want`` (see check)."""
    diff = relative_difference(want, got)
    if diff <= TOL:
        constant = all(w.size and np.all(w == w.flat[0]) for w in want)  # e.g. no detection above the threshold
        return {"status": "match", "detail": f"{diff:.2g}" + (" (every output constant)" if constant else "")}
    exact = _float64_difference(net, model, inputs)
    if exact <= TOL or exact < float("inf"):
        return {"status": "float32-limited" if exact <= TOL else "differs",
                "detail": f"{diff:.2g} in float32, {exact:.2g} in float64"}
    return _without_float64_cast(net, inputs, want, diff)
