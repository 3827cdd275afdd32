"""``generate_torch``: write readable PyTorch source for an MXNet model and return it with the weights loaded."""
from __future__ import annotations

import importlib.util
import itertools
import os
import sys
import types

import numpy as np

from migrate.errors import InputFileError, InputShapeError
from migrate.generate import ops  # noqa: F401  (importing the op families fills the registry)
from migrate.generate.module_tree import ModuleTree, module_expression
from migrate.generate.names import block_paths, identifier, param_keys, tree_order
from migrate.generate.registry import MULTI_OUTPUT, OpNode, translator
from migrate.generate.shapes import LOSS_HEADS, mxnet_node_shapes, translated_shapes
from migrate.generate.source_file import GeneratedClass, file_text
from migrate.mapping.export import normalize_shapes
from migrate.mapping.file_source import model_source
from migrate.mapping.symbol_graph import aux_state_names, symbol_document
from mxformats.atomic import write_text

__all__ = ["generate_torch", "translated_module"]


def generate_torch(mx_model, input_shapes, path: str | os.PathLike, *, input_dtypes=None) -> "torch.nn.Module":
    """Write a standalone PyTorch module for ``mx_model`` to ``path`` and return an instance with its weights.

    The file imports only torch and reads as a hand-written model: ``__init__`` builds the Gluon block tree from
    torch layers (``nn.Conv2d``, ``nn.Linear``, ``nn.Embedding``, ``nn.ReLU``, pooling, ``nn.Dropout``, and layers
    keeping MXNet's semantics and names: ``BatchNorm``, a torch ``_BatchNorm``; ``LayerNorm``, ``PReLU`` ...),
    ``Block`` containers for the blocks that hold others, and ``forward`` calls them in the MXNet graph's order
    (``x = self.features[0](data)``); ops torch has no layer for are function calls. The ``state_dict`` keys mirror
    the Gluon block tree (``features.3.conv.weight``; rebuilt from MXNet's name prefixes for symbol/params files).
    Training mode follows MXNet: BatchNorm uses batch statistics and updates its running statistics as MXNet does
    (``running = running * momentum + batch * (1 - momentum)`` with the biased batch variance), ``use_global_stats``
    and ``fix_gamma`` (gamma read as 1, with zero gradient) are kept, Dropout drops in ``train()`` mode. The class
    attribute ``MXNET_NAMES`` maps each MXNet name to its key: pass it as the ``mapping`` of ``torch_optimizer``,
    ``convert_optimizer_state`` and ``convert_weights``. The module compiles without graph breaks and exports
    (docs/migrate/generation.md); ``convert_sync_batchnorm`` syncs its BatchNorm layers keeping MXNet's statistics.

    Args:
        mx_model: an initialized Gluon ``HybridBlock`` or a tuple ``(symbol_json_path, params_path)`` (Module
            checkpoints included: ``arg:``/``aux:`` prefixes are dropped). Files are read without MXNet where MXNet
            is not installed (or ``MIGRATE_WITHOUT_MXNET=1``): the node shapes then come from running each node's
            translation, and the file written is the same as with MXNet.
        input_shapes: one input shape tuple, or a list of them for several inputs.
        path: the Python file to write (its folder must exist). The class is named after the Gluon block's class
            (or the symbol file's stem).
        input_dtypes: None (float32), one dtype, or one per input.

    Returns:
        An instance of the generated class (in training mode, like a fresh torch module), MXNet's weights loaded.

    Raises:
        UnsupportedOpError: a graph node has no translation (names the op, the node and the nearest known ops);
            nothing is written.
        InputShapeError: the shapes do not fit the model, or the graph needs an input that was not given.
        InputFileError: a symbol/params file is missing or unreadable, or a parameter has no value.
        ModelTypeError: ``mx_model`` is of an unsupported type.

    Example:
        >>> net = mxnet.gluon.model_zoo.vision.mobilenet_v2_1_0(); net.initialize()  # doctest: +SKIP
        >>> model = generate_torch(net, (1, 3, 64, 64), "mobilenet.py")  # doctest: +SKIP
        >>> opt = migrate.torch_optimizer(model, "settings.json", model.MXNET_NAMES)  # doctest: +SKIP

    Note:
        A Module checkpoint's loss head and label input are cut, as for ``name_mapping``: the module returns what
        fed the head (``SoftmaxOutput``'s logits; train it with ``CrossEntropyLoss(reduction="sum")``). A loss
        head met in a graph otherwise becomes its forward op (softmax; identity; sigmoid for the logistic one).
        Detection ops keep MXNet's fixed output shapes (NMS writes the kept boxes first and -1 rows after them), and
        where MXNet gives an op no gradient (box_decode, box_iou, MultiBoxDetection, ROI coordinates) the module
        gives none either; see docs/zoo_report.md for the GluonCV/GluonNLP models that generate.
        MXNet updates BatchNorm's running statistics in the backward pass, the generated module in the forward pass:
        the same values after each training step, but a training-mode forward without a backward changes them here
        and not in MXNet. Dropout draws torch's random numbers, not MXNet's.
    """
    shapes, dtypes = normalize_shapes(input_shapes, input_dtypes)
    source = model_source(mx_model, shapes, dtypes)
    class_name = _class_name(mx_model)
    code, keys, aux = _source(source, mx_model, shapes, dtypes, class_name)
    state = _state(source, keys, aux)
    module = types.ModuleType("migrate_generated_check")
    exec(compile(code, str(path), "exec"), module.__dict__)  # the whole file runs before anything is written
    getattr(module, class_name)().load_state_dict(state)
    write_text(path, code, error=InputFileError)
    model = getattr(_import(path), class_name)()
    model.load_state_dict(state)
    return model


def translated_module(source, input_shapes, input_dtypes=None) -> "torch.nn.Module":
    """The module ``generate_torch`` would write for ``source``, built in memory (no file), MXNet's weights loaded.

    ``name_mapping`` and ``verify`` use it as the MXNet side of files read without MXNet: one translation of MXNet's
    ops serves generation, matching and verification.

    Args:
        source: an ``MxSource`` (``file_source.read_mxnet_files``, or ``load_mxnet``).
        input_shapes: one input shape tuple, or a list of them.
        input_dtypes: None (float32), one dtype, or one per input.

    Returns:
        An instance of the translated class (class name ``MxnetGraph``), in training mode.

    Raises:
        UnsupportedOpError, InputShapeError, InputFileError: as ``generate_torch``.

    Examples:
        >>> source = read_mxnet_files("net-symbol.json", "net-0000.params")  # doctest: +SKIP
        >>> model = translated_module(source, (1, 3, 32, 32))  # doctest: +SKIP
        >>> model.MXNET_NAMES["conv0_weight"]  # doctest: +SKIP
        'conv0.weight'
    """
    shapes, dtypes = normalize_shapes(input_shapes, input_dtypes)
    code, keys, aux = _source(source, source, shapes, dtypes, "MxnetGraph")
    module = types.ModuleType("migrate_translated")
    exec(compile(code, "<migrate translated module>", "exec"), module.__dict__)
    model = module.MxnetGraph()
    model.load_state_dict(_state(source, keys, aux))
    return model


def _class_name(mx_model) -> str:
    if isinstance(mx_model, (tuple, list)):
        stem = os.path.basename(str(mx_model[0])).split(".")[0].replace("-symbol", "")
        return identifier("".join(part.capitalize() for part in stem.split("_")) or "Generated")
    return identifier(type(mx_model).__name__)


def _state(source, keys, aux) -> dict:
    import torch
    missing = sorted(name for name in keys if name not in source.params)
    if missing:
        raise InputFileError(f"MXNet parameters {missing[:10]} are used by the graph but have no value in the "
                             f"params; save the params file from the same model as the symbol")
    return {key: torch.from_numpy(np.ascontiguousarray(_numpy(source.params[name]))) for name, key in keys.items()}


def _numpy(value) -> np.ndarray:
    return value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)


def _import(path):
    name = f"migrate_generated_{abs(hash(os.path.abspath(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _graph(source, shapes, dtypes):
    """(nodes, heads, data input names, each node's output shapes in node order). Read without MXNet, the shapes
    come from running the translations (``shapes.translated_shapes``), else from MXNet's shape inference."""
    graph = symbol_document(source.symbol)
    nodes, heads = graph["nodes"], graph["heads"]
    label_only = {nodes[e[0]]["name"] for n in nodes if n["op"] in LOSS_HEADS for e in n["inputs"][1:]}
    used_elsewhere = {nodes[e[0]]["name"] for n in nodes if n["op"] not in LOSS_HEADS for e in n["inputs"]}
    inputs = [n for n in source.input_names if n not in label_only - used_elsewhere]
    if len(inputs) != len(shapes):
        raise InputShapeError(f"the MXNet graph has {len(inputs)} data input(s) {inputs}; received "
                              f"{len(shapes)} shape(s) {shapes}; give one shape per input")
    if source.without_mxnet:
        return nodes, heads, inputs, translated_shapes(nodes, inputs, shapes, dtypes, source.params)
    return nodes, heads, inputs, mxnet_node_shapes(nodes, *_shapes(source, dict(zip(inputs, shapes))))


def _shapes(source, given) -> tuple:
    internals = source.symbol.get_internals()
    known = {**{k: v.shape for k, v in source.params.items()}, **given}
    known = {k: v for k, v in known.items() if k in set(internals.list_inputs())}
    try:
        _, out_shapes, _ = internals.infer_shape_partial(**known)
    except Exception as exc:  # MXNet raises MXNetError with its own message
        raise InputShapeError(f"the MXNet graph rejects input shapes {given}: {str(exc).splitlines()[0]}; "
                              f"give the shapes the model accepts") from None
    return internals.list_outputs(), [tuple(s) if s else None for s in out_shapes]


def _source(source, mx_model, shapes, dtypes, class_name) -> tuple:
    """(the file's text, MXNet name -> state_dict key, the set of auxiliary-state names)."""
    nodes, heads, inputs, out_shapes = _graph(source, shapes, dtypes)
    aux = set(aux_state_names(source.symbol) if source.without_mxnet else source.symbol.list_auxiliary_states())
    used = [n["name"] for n in nodes if n["op"] == "null" and n["name"] in source.params]
    keys = param_keys(mx_model, used)
    tree = ModuleTree({keys[name]: (tuple(source.params[name].shape), np.dtype(source.params[name].dtype).name,
                                    name in aux) for name in used}, tree_order(mx_model))
    arg_names = [identifier(name) for name in inputs]
    walk = _Walk(nodes, out_shapes, keys, dict(zip(inputs, arg_names)), tree)
    walk.run(block_paths(mx_model, [n["name"] for n in nodes if n["op"] != "null"], used), heads)
    outputs = [walk.ref(h) for h in heads]
    walk.lines.append(f"return {outputs[0] if len(outputs) == 1 else '(' + ', '.join(outputs) + ')'}")
    missing = [n["name"] for i, n in enumerate(nodes) if n["op"] == "null" and walk.exprs[i] is None
               and any(e[0] == i for m in nodes if m["op"] not in LOSS_HEADS for e in m["inputs"])]
    if missing:
        raise InputShapeError(f"the MXNet graph reads variables {missing} that are neither inputs nor parameters; "
                              f"save the params file with them, or give them as inputs")
    origin = (f"symbol file {os.path.basename(str(mx_model[0]))}" if isinstance(mx_model, (tuple, list))
              else "graph" if mx_model is source else f"Gluon block {type(mx_model).__name__}")
    text = file_text(GeneratedClass(class_name, origin, list(zip(arg_names, shapes)), walk.lines, walk.emitted,
                                    {name: keys[name] for name in used}, tree))
    return text, keys, aux


class _Walk:
    """The graph's nodes in order, each written as one line of the forward by its translator. Values are named as a
    hand-written forward names them: a node's output takes the name of an input that is not read after it
    (``x = self.features[1](x)``), else the first of ``x``, ``x1``, ``x2`` ... that holds nothing still read."""

    def __init__(self, nodes, out_shapes, keys, inputs, tree):
        self.nodes, self.out_shapes, self.keys, self.inputs, self.tree = nodes, out_shapes, keys, inputs, tree
        self.multi = {i for i, n in enumerate(nodes) if n["op"] in MULTI_OUTPUT or len(out_shapes[i]) > 1}
        self.exprs, self.lines, self.emitted = {}, [], set()

    def run(self, blocks: dict, heads: list) -> None:
        """Write every node (``blocks``: op node name -> the module path of the block that made it alone; ``heads``:
        the graph's outputs, read at the end)."""
        last = _last_reads(self.nodes, heads)
        live = {}  # variable name -> the node whose value it holds
        for i, node in enumerate(self.nodes):
            if node["op"] == "null":
                self.exprs[i] = self._variable(node["name"])
                continue
            entries = node["inputs"][:1] if node["op"] in LOSS_HEADS else node["inputs"]
            op_node = OpNode(node["op"], node["name"], node.get("attrs", {}), [self.ref(e) for e in entries],
                             [self._shape(e) for e in entries], self._shape([i, 0]),
                             in_ops=[(self.nodes[e[0]]["op"], self.nodes[e[0]].get("attrs", {})) for e in entries],
                             param_keys=[self._key(e) for e in entries], block=blocks.get(node["name"]),
                             last_read=[last[e[0]] == i and self.nodes[e[0]]["op"] != "null"
                                        and e[0] not in self.multi for e in entries],
                             site=self.tree, subgraphs=node.get("subgraphs", []))
            expression = translator(node["op"], node["name"])(op_node)
            self.lines += op_node.statements  # a loop's lines (_foreach) before the value it gives
            done = sorted({name for name, j in live.items() if last[j] <= i}, key=_number)
            for name in done:
                del live[name]
            name = done[0] if done else next(n for n in _names() if n not in live and n not in self.inputs.values())
            self.lines.append(f"{name} = {expression}")
            live[name] = i
            self.emitted |= op_node.emitted
            self.exprs[i] = name

    def _key(self, entry):
        node = self.nodes[entry[0]]
        return self.keys.get(node["name"]) if node["op"] == "null" else None

    def _variable(self, name):
        """The expression of a graph variable: a parameter's module path, or a data input's argument name."""
        if name in self.keys:
            self.tree.touch(self.keys[name])
            return module_expression(self.keys[name])
        return self.inputs.get(name)

    def ref(self, entry) -> str:
        """The expression of graph entry (node, output index): indexed where the node returns several outputs."""
        nid, index = entry[0], entry[1]
        return f"{self.exprs[nid]}[{index}]" if nid in self.multi else self.exprs[nid]

    def _shape(self, entry):
        """The shape of graph entry (node, output index); a parameter's own where inference left it unknown."""
        shapes = self.out_shapes[entry[0]]
        shape = shapes[entry[1]] if entry[1] < len(shapes) else None
        key = self._key(entry)
        return tuple(self.tree.specs[key].shape) if shape is None and key is not None else shape


def _names():
    """``x``, ``x1``, ``x2``, ...: the names of the forward's values."""
    return itertools.chain(["x"], (f"x{k}" for k in itertools.count(1)))


def _number(name: str) -> int:
    return int(name[1:] or 0)


def _last_reads(nodes, heads) -> dict:
    """Node index -> the index of the last node that reads its value (past the end for the graph's outputs)."""
    last = {i: i for i in range(len(nodes))}
    for i, node in enumerate(nodes):
        entries = node["inputs"][:1] if node["op"] in LOSS_HEADS else node["inputs"]
        for entry in entries:
            last[entry[0]] = i
    for entry in heads:
        last[entry[0]] = len(nodes)
    return last
