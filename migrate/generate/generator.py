"""``generate_torch``: write readable PyTorch source for an MXNet model and return it with the weights loaded."""
from __future__ import annotations

import importlib.util
import inspect
import os
import re
import sys
import types

import numpy as np

from migrate.errors import InputFileError, InputShapeError
# importing the translator modules fills the registry (one module per op family)
from migrate.generate import ops, ops_detection, ops_indexing, ops_sequence  # noqa: F401
from migrate.generate import ops_tensor, ops_vision, rnn_ops  # noqa: F401
from migrate.generate.names import identifier, local_names, param_keys
from migrate.generate.registry import OpNode, translator
from migrate.generate.runtime import HELPERS
from migrate.generate.shapes import LOSS_HEADS, translated_shapes
from migrate.mapping.export import normalize_shapes
from migrate.mapping.file_source import model_source
from migrate.mapping.symbol_graph import aux_state_names, symbol_document
from mxformats.atomic import write_text

__all__ = ["generate_torch", "translated_module"]

MULTI_OUTPUT = {"SliceChannel", "split", "RNN"}


def generate_torch(mx_model, input_shapes, path, *, input_dtypes=None):
    """Write a standalone PyTorch module for ``mx_model`` to ``path`` and return an instance with its weights.

    The file imports only torch and holds one ``torch.nn.Module`` subclass whose ``state_dict`` keys mirror the
    Gluon block tree (``features.3.conv.weight``; rebuilt from MXNet's name prefixes for symbol/params files) and
    whose ``forward`` follows the MXNet graph op by op, in training mode too: BatchNorm uses batch statistics and
    updates its running statistics as MXNet does (``running = running * momentum + batch * (1 - momentum)`` with the
    biased batch variance), ``use_global_stats`` and ``fix_gamma`` (gamma read as 1, with zero gradient) are kept,
    Dropout drops in ``train()`` mode. The class attribute ``MXNET_NAMES`` maps each MXNet name to its key: pass it
    as the ``mapping`` of ``torch_optimizer``, ``convert_optimizer_state`` and ``convert_weights``.

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
        MXNet updates BatchNorm's running statistics in
        the backward pass, the generated module in the forward pass: the same values after each training step,
        but a training-mode forward without a backward changes them here and not in MXNet. Dropout draws torch's
        random numbers, not MXNet's.
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


def translated_module(source, input_shapes, input_dtypes=None):
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
    return nodes, heads, inputs, _node_shapes(nodes, *_shapes(source, dict(zip(inputs, shapes))))


def _node_shapes(nodes, names, shapes) -> list:
    """Each node's output shapes, from MXNet's internal outputs (listed in node order). Names are not keys: a Gluon
    block called twice (one Activation reused) makes nodes of the same name."""
    out, k = [], 0
    for node in nodes:
        name, mine = node["name"], []
        if node["op"] == "null":
            if k < len(names) and names[k] == name:
                mine, k = [shapes[k]], k + 1
        elif k < len(names) and names[k] == f"{name}_output":
            mine, k = [shapes[k]], k + 1
        else:
            while k < len(names) and names[k] == f"{name}_output{len(mine)}":
                mine, k = mine + [shapes[k]], k + 1
        out.append(mine)
    return out


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
    multi = {i for i, n in enumerate(nodes) if n["op"] in MULTI_OUTPUT or len(out_shapes[i]) > 1}
    aux = set(aux_state_names(source.symbol) if source.without_mxnet else source.symbol.list_auxiliary_states())
    used = [n["name"] for n in nodes if n["op"] == "null" and n["name"] in source.params]
    keys = param_keys(mx_model, used)
    arg_names = [identifier(name) for name in inputs]
    op_nodes = [i for i, n in enumerate(nodes) if n["op"] != "null"]
    local = dict(zip(op_nodes, local_names([nodes[i]["name"] for i in op_nodes], set(arg_names))))
    exprs, lines, helpers = {}, [], set()
    for i, node in enumerate(nodes):
        if node["op"] == "null":
            exprs[i] = _variable(node["name"], keys, dict(zip(inputs, arg_names)))
            continue
        entries = node["inputs"][:1] if node["op"] in LOSS_HEADS else node["inputs"]
        op_node = OpNode(node["op"], node["name"], node.get("attrs", {}), [_ref(exprs, multi, e) for e in entries],
                         [_shape_of(out_shapes, e) for e in entries], _shape_of(out_shapes, [i, 0]),
                         in_ops=[(nodes[e[0]]["op"], nodes[e[0]].get("attrs", {})) for e in entries])
        lines.append(f"{local[i]} = {translator(node['op'], node['name'])(op_node)}")
        owners = sorted({keys[nodes[e[0]]["name"]].rsplit(".", 1)[0] for e in entries
                         if nodes[e[0]]["op"] == "null" and nodes[e[0]]["name"] in keys and "." in
                         keys[nodes[e[0]]["name"]]})
        data_in = any(nodes[e[0]]["op"] != "null" or nodes[e[0]]["name"] not in keys for e in entries)
        if len(owners) == 1 and data_in:  # a layer with parameters: verify compares its output node by node
            lines.append(f"self._record({owners[0]!r}, {local[i]})")
        helpers |= op_node.helpers
        exprs[i] = local[i]
    outputs = [_ref(exprs, multi, h) for h in heads]
    lines.append(f"return {outputs[0] if len(outputs) == 1 else '(' + ', '.join(outputs) + ')'}")
    missing = [n["name"] for i, n in enumerate(nodes) if n["op"] == "null" and exprs[i] is None
               and any(e[0] == i for m in nodes if m["op"] not in LOSS_HEADS for e in m["inputs"])]
    if missing:
        raise InputShapeError(f"the MXNet graph reads variables {missing} that are neither inputs nor parameters; "
                              f"save the params file with them, or give them as inputs")
    return _file(class_name, mx_model, keys, aux, source, arg_names, shapes, lines, helpers), keys, aux


def _variable(name, keys, inputs):
    if name in keys:
        return "self" + "".join(f"[{s}]" if s.isdigit() else f".{s}" for s in keys[name].split("."))
    return inputs.get(name)


def _ref(exprs, multi, entry) -> str:
    """The expression of graph entry (node, output index): indexed where the node returns several outputs."""
    nid, index = entry[0], entry[1]
    return f"{exprs[nid]}[{index}]" if nid in multi else exprs[nid]


def _helper_closure(names) -> list:
    """``names`` and every runtime helper their source calls, sorted (the helpers copied into the file)."""
    todo, done = list(names), set()
    while todo:
        name = todo.pop()
        if name not in done:
            done.add(name)
            source = inspect.getsource(HELPERS[name])
            todo += [h for h in HELPERS if h != name and re.search(rf"\b{h}\(", source)]
    return sorted(done)


def _shape_of(out_shapes, entry):
    shapes = out_shapes[entry[0]]
    return shapes[entry[1]] if entry[1] < len(shapes) else None


def _spec_lines(keys, names, source) -> list:
    rows = []
    for name in names:
        value = source.params[name]
        rows.append(f"    {keys[name]!r}: ({tuple(value.shape)!r}, torch.{np.dtype(value.dtype).name}, {name!r}),")
    return rows


def _file(class_name, mx_model, keys, aux, source, arg_names, shapes, lines, helpers) -> str:
    origin = (f"symbol file {os.path.basename(str(mx_model[0]))}" if isinstance(mx_model, (tuple, list))
              else "graph" if mx_model is source else f"Gluon block {type(mx_model).__name__}")
    params = [n for n in keys if n not in aux]
    buffers = [n for n in keys if n in aux]
    helper_src = "\n\n".join(inspect.getsource(HELPERS[h]) for h in _helper_closure(helpers))
    body = "\n".join("        " + line for line in lines)
    return f'''"""PyTorch translation of the MXNet {origin}, written by migrate.generate_torch.

Inputs: {", ".join(f"{a} {s}" for a, s in zip(arg_names, shapes))}. The forward follows the MXNet graph op by op, in
training mode too (BatchNorm's MXNet momentum and biased running variance, fix_gamma, use_global_stats, Dropout).
Standalone: imports only torch. MXNET_NAMES maps each MXNet parameter name to its state_dict key.
"""
import math  # noqa: F401

import torch
import torch.nn.functional as F  # noqa: F401

# state_dict key: (shape, dtype, MXNet name)
PARAMETERS = {{
{chr(10).join(_spec_lines(keys, params, source))}
}}
BUFFERS = {{
{chr(10).join(_spec_lines(keys, buffers, source))}
}}
MXNET_NAMES = {{mx_name: key for key, (_, _, mx_name) in {{**PARAMETERS, **BUFFERS}}.items()}}


class _Node(torch.nn.Module):
    """A block of the MXNet model: holds its parameters and child blocks (``node[3]`` reads child ``"3"``)."""

    def __getitem__(self, key):
        return self._modules[str(key)]


def _add(root, key, value):
    *path, leaf = key.split(".")
    for name in path:
        if name not in root._modules:
            root.add_module(name, _Node())
        root = root._modules[name]
    if isinstance(value, torch.nn.Parameter):
        root.register_parameter(leaf, value)
    else:
        root.register_buffer(leaf, value)


{helper_src}


class {class_name}(_Node):
    """The MXNet {origin} as a torch module (weights: load a state_dict, or use migrate.generate_torch)."""

    MXNET_NAMES = MXNET_NAMES

    def __init__(self):
        super().__init__()
        self.recorded = None  # set to a dict to collect each layer's output by module path (migrate.verify does)
        for key, (shape, dtype, _) in PARAMETERS.items():
            _add(self, key, torch.nn.Parameter(torch.zeros(shape, dtype=dtype)))
        for key, (shape, dtype, _) in BUFFERS.items():
            _add(self, key, torch.zeros(shape, dtype=dtype))

    def _device(self):
        """Where tensors the graph creates go (zeros, ones, arange, random): the device of the weights."""
        for tensor in self.parameters():
            return tensor.device
        for tensor in self.buffers():
            return tensor.device
        return torch.device("cpu")

    def _record(self, path, value):
        if self.recorded is not None:
            self.recorded[path] = value.detach().clone()

    def forward(self, {", ".join(arg_names)}):
{body}
'''
