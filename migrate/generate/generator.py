"""The graph walk: an MXNet source's graph translated node by node into the text of a torch module (``module_code``)
and that module built in memory (``translated_module``: what stands in for MXNet where none runs). It reads its model
through the ``MxSource`` interface (graph document, auxiliary states, node shapes, parameters) and imports nothing of
``migrate.source``: ``generate_torch`` (``writer``) reads the model and writes the file.
"""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np

from migrate.errors import InputFileError, InputShapeError
from migrate.generate import ops  # noqa: F401  (importing the op families fills the registry)
from migrate.generate.module_tree import ModuleTree, module_expression, parameter_module, parameter_readers
from migrate.generate.names import block_classes, block_paths, identifier, param_keys, tree_order
from migrate.generate.registry import MULTI_OUTPUT, OpNode, translator
from migrate.arguments import normalize_shapes
from migrate.generate.shapes import LOSS_HEADS
from migrate.generate.source_file import GeneratedClass, file_text, in_memory_module

if TYPE_CHECKING:
    import torch

__all__ = ["module_code", "translated_module"]


def translated_module(source, input_shapes, input_dtypes=None) -> "torch.nn.Module":
    """The module ``generate_torch`` would write for ``source``, built in memory (no file), MXNet's weights loaded.

    ``name_mapping`` and ``verify`` use it as the MXNet side of files read without MXNet
    (``migrate.source.translated``): one translation of MXNet's ops serves generation, matching and verification.
    Its keys are read from MXNet's name prefixes, whatever the source read.

    Args:
        source: an ``MxSource`` (``migrate.source``).
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
    code, state = module_code(source, shapes, dtypes, "MxnetGraph", "graph")
    model = in_memory_module(code, "MxnetGraph").MxnetGraph()
    model.load_state_dict(state)
    return model


def module_code(source, shapes, dtypes, class_name: str, origin: str, block=None) -> tuple[str, dict]:
    """The text of the torch module translating ``source``'s graph, and its ``state_dict`` (MXNet's weights).

    Args:
        source: an ``MxSource``.
        shapes: one shape per data input (``migrate.arguments.normalize_shapes``).
        dtypes: one numpy dtype per data input.
        class_name: the class the file defines.
        origin: what the file says it was generated from (``symbol file net-symbol.json``, ``Gluon block Net``).
        block: the Gluon block whose attribute tree names the layers, or None (keys from MXNet's name prefixes).

    Raises:
        UnsupportedOpError, InputShapeError, InputFileError: as ``generate_torch``.

    Examples:
        >>> code, state = module_code(source, [(1, 4)], [np.dtype("float32")], "Net", "graph")  # doctest: +SKIP
        >>> "class Net(nn.Module)" in code  # doctest: +SKIP
        True
    """
    code, keys, aux = _source(source, block, shapes, dtypes, class_name, origin)
    return code, _state(source, keys, aux)


def _state(source, keys, aux) -> dict:
    import torch
    missing = sorted(name for name in keys if name not in source.params)
    if missing:
        raise InputFileError(f"MXNet parameters {missing[:10]} are used by the graph but have no value in the "
                             f"params; save the params file from the same model as the symbol")
    return {key: torch.from_numpy(np.ascontiguousarray(_numpy(source.params[name]))) for name, key in keys.items()}


def _numpy(value) -> np.ndarray:
    return value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)


def _graph(source, shapes, dtypes):
    """(nodes, heads, data input names, each node's output shapes in node order: ``MxSource.node_shapes``)."""
    graph = source.document
    nodes, heads = graph["nodes"], graph["heads"]
    label_only = {nodes[e[0]]["name"] for n in nodes if n["op"] in LOSS_HEADS for e in n["inputs"][1:]}
    used_elsewhere = {nodes[e[0]]["name"] for n in nodes if n["op"] not in LOSS_HEADS for e in n["inputs"]}
    inputs = [n for n in source.input_names if n not in label_only - used_elsewhere]
    if len(inputs) != len(shapes):
        raise InputShapeError(f"the MXNet graph has {len(inputs)} data input(s) {inputs}; received "
                              f"{len(shapes)} shape(s) {shapes}; give one shape per input")
    return nodes, heads, inputs, source.node_shapes(inputs, shapes, dtypes)


def _source(source, block, shapes, dtypes, class_name, origin) -> tuple:
    """(the file's text, MXNet name -> state_dict key, the set of auxiliary-state names)."""
    nodes, heads, inputs, out_shapes = _graph(source, shapes, dtypes)
    aux = set(source.aux_names)
    used = [n["name"] for n in nodes if n["op"] == "null" and n["name"] in source.params]
    keys = param_keys(block, used)
    dtype = {name: np.dtype(source.params[name].dtype) for name in used}  # integer tensors (int8 weights): buffers
    tree = ModuleTree({keys[name]: (tuple(source.params[name].shape), dtype[name].name,
                                    name in aux or dtype[name].kind not in "fc") for name in used},
                      tree_order(block), block_classes(block))
    arg_names = [identifier(name) for name in inputs]
    walk = _Walk(nodes, out_shapes, keys, dict(zip(inputs, arg_names)), tree)
    walk.run(block_paths(block, [n["name"] for n in nodes if n["op"] != "null"], used), heads)
    outputs = [walk.ref(h) for h in heads]
    walk.lines.append(f"return {outputs[0] if len(outputs) == 1 else '(' + ', '.join(outputs) + ')'}")
    missing = [n["name"] for i, n in enumerate(nodes) if n["op"] == "null" and walk.exprs[i] is None
               and any(e[0] == i for m in nodes if m["op"] not in LOSS_HEADS for e in m["inputs"])]
    if missing:
        raise InputShapeError(f"the MXNet graph reads variables {missing} that are neither inputs nor parameters; "
                              f"save the params file with them, or give them as inputs")
    text = file_text(GeneratedClass(class_name, origin, list(zip(arg_names, shapes)), walk.lines, walk.emitted,
                                    {name: keys[name] for name in used}, tree, tuple(source.notes)))
    return text, keys, aux


class _Walk:
    """The graph's nodes in order, each written as one line of the forward by its translator. Values are named as a
    hand-written forward names them: a node's output takes the name of an input that is not read after it
    (``x = self.features[1](x)``), else the first of ``x``, ``x1``, ``x2`` ... that holds nothing still read."""

    def __init__(self, nodes, out_shapes, keys, inputs, tree):
        self.nodes, self.out_shapes, self.keys, self.inputs, self.tree = nodes, out_shapes, keys, inputs, tree
        self.multi = {i for i, n in enumerate(nodes) if n["op"] in MULTI_OUTPUT or len(out_shapes[i]) > 1}
        self.exprs, self.lines, self.emitted = {}, [], set()
        self.readers = parameter_readers(nodes, keys)

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
            expression = parameter_module(op_node, self.tree, self.readers) or expression
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
