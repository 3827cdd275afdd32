"""``FileSource``: MXNet's ``NAME-symbol.json`` + ``NAME-0000.params`` read without MXNet.

The graph comes from ``mxformats.symbol.read_symbol`` (a ``SymbolGraph``, as MXNet 1.9.1 loads the file), the
parameters from ``mxformats.ndarray`` (numpy arrays, ``arg:``/``aux:`` dropped), a Module checkpoint's loss heads are
cut from the plain graph (``module_checkpoint``), and the auxiliary states are the variables at an op's auxiliary
inputs (``mxformats.symbol.INPUT_NAMES``). No MXNet runs such a model: where MXNet would run, the graph's torch
translation (``migrate.generate``, tested against MXNet op by op) stands in (``translated``).

Examples:
    >>> source = read_mxnet_files("net-symbol.json", "net-0000.params")  # doctest: +SKIP
    >>> source.reader, source.input_names  # doctest: +SKIP
    ('MXNet graph read from symbol.json without MXNet', ['data'])
"""
from __future__ import annotations

import json
import os

from mxformats.errors import MXNetRequiredError, SymbolFileError
from mxformats.ndarray import load_ndarrays
from mxformats.symbol import INPUT_NAMES, MXNET_VERSION, SymbolGraph, read_symbol, symbol_from_json

from migrate.errors import InputFileError
from migrate.source import module_checkpoint
from migrate.source.base import READ_WITHOUT_MXNET, TRANSLATION, MxSource

__all__ = ["FileSource", "aux_state_names", "graph_document", "read_mxnet_files"]

_AUX_INPUTS = ("moving_mean", "moving_var", "moving_avg")  # the op inputs MXNet keeps as auxiliary states


class FileSource(MxSource):
    """Symbol/params files read without MXNet (see ``MxSource`` for the arguments).

    Args:
        graph: The graph (loss heads cut), a ``mxformats.symbol.SymbolGraph``.
        params: Parameter name -> ``numpy.ndarray``.
    """

    reader = READ_WITHOUT_MXNET
    compared_with = TRANSLATION

    def __init__(self, graph: SymbolGraph, params: dict, input_names: list, notes=(), *, files=None):
        super().__init__(params, input_names, notes, files=files)
        self.graph = graph

    @staticmethod
    def accepts(mx_model) -> bool:
        """True for a pair ``(symbol_json_path, params_path)``."""
        return isinstance(mx_model, (tuple, list)) and len(mx_model) == 2

    @classmethod
    def read(cls, mx_model, shapes=None, dtypes=None) -> "FileSource":
        """``read_mxnet_files`` of the pair ``mx_model`` (``shapes`` and ``dtypes`` are not needed)."""
        return read_mxnet_files(*mx_model)

    def _document(self) -> dict:
        return graph_document(self.graph)

    @property
    def aux_names(self) -> list:
        return aux_state_names(self.graph)

    def node_shapes(self, inputs: list, shapes, dtypes) -> list:
        """Each node's output shapes from running its translation (``migrate.generate.shapes.translated_shapes``)."""
        from migrate.generate.shapes import translated_shapes  # torch and the translators, imported when first used
        return translated_shapes(self.document["nodes"], inputs, shapes, dtypes, self.params)

    def onnx(self, shapes, dtypes, *, with_weights=False, progress=None):
        """The ONNX export of the graph's torch translation, initializers named as in MXNet (``translated``)."""
        from migrate.source.translated import export_translated  # torch and the translators, imported when first used
        return export_translated(self, shapes, dtypes, with_weights=with_weights, progress=progress)

    def node_outputs(self, shapes, dtypes, mapping):
        """The outputs of the graph's torch translation in MXNet's place (``translated.TranslatedNodeOutputs``)."""
        from migrate.source.translated import TranslatedNodeOutputs
        return TranslatedNodeOutputs(self, shapes, dtypes, mapping)

    def live(self, what: str) -> MxSource:
        """Raises ``MXNetRequiredError``: no MXNet read these files."""
        raise MXNetRequiredError.for_(what)


def read_mxnet_files(symbol_path, params_path) -> FileSource:
    """Read a symbol JSON and its params file without MXNet.

    Args:
        symbol_path: ``NAME-symbol.json`` (``HybridBlock.export``, ``Module.save_checkpoint``, any MXNet 1.x).
        params_path: ``NAME-0000.params`` (names with or without ``arg:``/``aux:``).

    Returns:
        A ``FileSource`` (loss heads cut, numpy parameters).

    Raises:
        InputFileError: a file is missing, not an MXNet symbol / params file (names the field or byte offset), the
            params are an unnamed list, or they lack an array the graph uses.

    Examples:
        >>> read_mxnet_files("bnnet-symbol.json", "bnnet-0000.params").notes  # doctest: +SKIP
        ["Module checkpoint: loss head SoftmaxOutput 'softmax' and label input ['softmax_label'] cut ..."]
    """
    sym_path, params_path = os.fspath(symbol_path), os.fspath(params_path)
    module_checkpoint.check_files_exist(sym_path, params_path)
    try:
        graph = read_symbol(sym_path)
    except SymbolFileError as exc:
        raise InputFileError(str(exc)) from None
    params = module_checkpoint.named_params(load_ndarrays(params_path, error=InputFileError), params_path)
    graph, notes = _without_loss_heads(graph, params)
    aux = aux_state_names(graph)
    variables = list(dict.fromkeys(graph.nodes[i].name for i in graph.arg_nodes))
    module_checkpoint.check_params_present(aux, [n for n in variables if n not in aux], params, params_path)
    inputs = [name for name in variables if name not in params]
    return FileSource(graph, params, inputs, notes, files=(sym_path, params_path))


def _without_loss_heads(graph: SymbolGraph, params: dict) -> tuple:
    """``(graph, notes)``: ``graph`` without its loss heads and label inputs (``module_checkpoint.loss_cut``), its
    nodes in the order MXNet's cut symbol lists them; ``graph`` and ``[]`` when it has no loss head."""
    document = graph_document(graph)
    cut = module_checkpoint.loss_cut(document, params)
    if cut is None:
        return graph, []
    frontier, notes = cut
    document = dict(document, heads=[[i, k, 0] for i, k in frontier], attrs={"mxnet_version": ["int", MXNET_VERSION]})
    return symbol_from_json(json.dumps(document), "the Module checkpoint's symbol without its loss heads"), notes


def graph_document(graph: SymbolGraph) -> dict:
    """The symbol JSON document of ``graph`` (as ``Symbol.tojson()`` writes it), subgraphs included.

    Examples:
        >>> graph_document(read_symbol("net-symbol.json"))["nodes"][0]["op"]  # doctest: +SKIP
        'null'
    """
    nodes = [{"op": n.op, "name": n.name, "attrs": dict(n.attrs), "inputs": [[i, k, 0] for i, k in n.inputs],
              **({"control_deps": list(n.control_deps)} if n.control_deps else {}),
              **({"subgraphs": [graph_document(g) for g in n.subgraphs]} if n.subgraphs else {})}
             for n in graph.nodes]
    return {"nodes": nodes, "arg_nodes": list(graph.arg_nodes), "heads": [[i, k, 0] for i, k in graph.heads],
            "attrs": {"mxnet_version": ["int", graph.mxnet_version]}}


def aux_state_names(graph: SymbolGraph) -> list:
    """The auxiliary states of ``graph`` (what ``Symbol.list_auxiliary_states()`` lists), without MXNet: the
    variables at an op's auxiliary inputs (BatchNorm's ``moving_mean``/``moving_var``, ...), in node order.

    Examples:
        >>> aux_state_names(read_symbol("bn-symbol.json"))  # doctest: +SKIP
        ['bn1_moving_mean', 'bn1_moving_var']
    """
    aux = set()
    for node in graph.nodes:
        names = INPUT_NAMES[node.op](node.attrs) if node.op in INPUT_NAMES else ()
        aux |= {node.inputs[k][0] for k, name in enumerate(names) if name in _AUX_INPUTS and k < len(node.inputs)}
    return list(dict.fromkeys(graph.nodes[i].name for i in sorted(aux) if graph.nodes[i].is_variable))
