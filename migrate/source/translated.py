"""What stands in for MXNet where a ``FileSource`` is read without it: the graph translated to torch
(``generate``'s translators), exported to ONNX (``FileSource.onnx``) and run for its nodes' outputs
(``TranslatedNodeOutputs``, ``FileSource.node_outputs``).

Matching reads the MXNet model as an ONNX graph whose initializers carry the MXNet parameter names. MXNet's own
exporter needs MXNet; for files read without it, the module ``generate_torch`` would write is built in memory
(``translated_module``), exported by ``export_torch`` (structure-only, training mode, as the torch side), and its
initializers renamed from ``state_dict`` keys to MXNet names (``MXNET_NAMES``). A linear layer over
packed parameters (GluonNLP's query/key/value weights concatenated) is written as MXNet's exporter writes it, one
``Gemm`` over the packed weight and bias, where torch writes ``MatMul`` of its transpose and an ``Add``, so that
matching splits it per parameter alike. The matched mapping then converts as the one matched against MXNet's export
does (tests/migrate/test_without_mxnet_files.py: model-zoo, GluonCV and GluonNLP pairs, RNNs, Module checkpoints).

The translation's nodes are read as its layers' outputs: the output of the MXNet op that first reads a parameter is
that of the translated layer holding the parameter (forward hooks, ``migrate.module_outputs``), or of the translation's
statement reading it where its code does (a function call on a Gluon block's tensor). All are held at once.

Examples:
    >>> model = export_translated(read_mxnet_files(*files), [(1, 3, 32, 32)], [np.float32])  # doctest: +SKIP
    >>> model.graph.initializer[0].name  # doctest: +SKIP
    'resnetv10_conv0_weight'
"""
from __future__ import annotations

import onnx.helper

from migrate.generate.generator import translated_module
from migrate.generate.shapes import translated_values
from migrate.module_outputs import captured_module_outputs, node_sites, torch_inputs
from migrate.onnx_export.torch_export import export_torch
from migrate.source.base import MxSource
from migrate.source.packed import packed_slices

__all__ = ["TranslatedNodeOutputs", "export_translated"]


class TranslatedNodeOutputs:
    """The outputs of a source's nodes in eval mode, its graph's torch translation computing them (see
    ``MxSource.node_outputs``).

    A parameter packed with others into one ``FullyConnected`` (GluonNLP's query/key/value) is compared as its slice of
    that node's output (``packed.packed_slices``); the translation writes that node as a function call, so its output
    comes from evaluating the graph's translation node by node (``generate.shapes.translated_values``).

    Args:
        source: The model (its graph, parameters and inputs).
        shapes, dtypes: The data inputs.
        mapping: The ``NameMapping``: which torch module each node is compared with.

    Raises:
        UnsupportedOpError: the graph has an op with no translation (names it and the node).
        InputShapeError: the shapes do not fit the graph.
    """

    missing = "no layer of the translation computes it"

    def __init__(self, source: MxSource, shapes, dtypes, mapping):
        self.source = source
        self.module = translated_module(source, shapes, dtypes).eval()
        self.layers = _layers(source, mapping, self.module)
        self.slices = packed_slices(source.document, source.params, self._packed_value)

    def output_sizes(self, ops) -> dict:
        """``{}``: the sizes are known once the translation has run (all outputs are held at once)."""
        return {}

    def skip_note(self, op: str) -> None:
        """None: a node the translation cannot show alone has no output (``missing``)."""
        return None

    def run(self, inputs: list, pairs: list, *, with_final=True) -> tuple[list, list]:
        """(the output of each pair's node, the final outputs), as numpy arrays, on the numpy ``inputs``."""
        import torch
        wanted = [self.layers.get(pair[0]) if pair[0] not in self.slices else None for pair in pairs]
        with torch.no_grad(), captured_module_outputs(self.module, [w for w in wanted if w is not None]) as found:
            final = self.module(*torch_inputs(inputs))
        final = final if isinstance(final, (tuple, list)) else [final]
        packed = self._packed_outputs(inputs, [pair[0] for pair in pairs])
        return [packed[pair[0]] if pair[0] in packed else _numpy(found.get(w)) for pair, w in zip(pairs, wanted)], \
            [f.detach().numpy() for f in final]

    def _packed_outputs(self, inputs: list, ops: list) -> dict:
        """Packing op -> its parameter's slice of the ``FullyConnected`` output, for those of ``ops`` in ``slices``."""
        ops = [op for op in dict.fromkeys(ops) if op in self.slices]
        if not ops:
            return {}
        fcs = [self.slices[op].node for op in ops]
        values = translated_values(self.source.document["nodes"], dict(zip(self.source.input_names, inputs)),
                                   _numpy_params(self.source.params), fcs)
        return {op: values[fc].numpy()[..., self.slices[op].indices] for op, fc in zip(ops, fcs)}

    def _packed_value(self, node: int, output: int, values: dict):
        """Output ``output`` of ``node`` with the parameters set to ``values`` (numpy), the translation computing it."""
        value = translated_values(self.source.document["nodes"], {}, values, [node])[node]
        return (value[output] if isinstance(value, tuple) else value).numpy()


def _layers(source: MxSource, mapping, module) -> dict:
    """MXNet op of each node compared -> where the translation ``module`` computes that op's output: the holder of
    the first mapped parameter the op reads, or that parameter's key where the translation's code reads it
    (``node_sites``: a function call on a Gluon block's tensor)."""
    consumer = {name: node["name"] for name, (node, _) in source.parameter_users().items()}
    mx_names = module.MXNET_NAMES
    sites = node_sites(module, mx_names.values())
    layers = {}
    for name in mapping:
        if mapping.entry(name).get("fold") or name not in consumer or name not in mx_names:
            continue
        layers.setdefault(consumer[name], sites[mx_names[name]])
    return layers


def _numpy_params(params: dict) -> dict:
    """Parameter name -> numpy array (MXNet's NDArrays copied out, where the source holds them)."""
    return {k: v.asnumpy() if hasattr(v, "asnumpy") else v for k, v in params.items()}


def _numpy(value):
    import torch
    return value.detach().numpy() if isinstance(value, torch.Tensor) else None


def export_translated(source: MxSource, shapes, dtypes, *, with_weights=False, progress=None):
    """Return the ONNX ``ModelProto`` of ``source``'s graph, translated to torch, initializers named as in MXNet.

    Args:
        source: the MXNet model (read without MXNet, or with it).
        shapes: one shape per data input.
        dtypes: one numpy dtype per data input.
        with_weights: export the parameter values too (``export_torch``'s ``with_weights``).
        progress: optional callable ``progress(1)``, called per module traced.

    Returns:
        An ``onnx.ModelProto`` (structure-only unless ``with_weights``, as ``export_torch`` writes it).

    Raises:
        UnsupportedOpError: a node has no translation (names the op and the node).
        InputShapeError: the shapes do not fit the graph.
        ExportError: torch's ONNX export of the translation fails.

    Examples:
        >>> export_translated(source, [(2, 4)], [np.float32]).graph.input[0].name  # doctest: +SKIP
        'data'
    """
    module = translated_module(source, shapes, dtypes)
    model = export_torch(module, shapes, dtypes, with_weights=with_weights, progress=progress)
    mx_names = {key: name for name, key in module.MXNET_NAMES.items()}
    graph = model.graph
    for item in list(graph.initializer) + list(graph.input) + list(graph.value_info):
        item.name = mx_names.get(item.name, item.name)
    for node in graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = mx_names.get(name, name)
    _packed_linear_as_gemm(graph, set(source.params))
    return model


_PLUMBING = frozenset({"Reshape", "Concat", "Identity", "Unsqueeze", "Squeeze", "Flatten", "Cast"})


def _packed_linear_as_gemm(graph, params: set) -> None:
    """Each ``MatMul(x, Transpose(packed weight))`` [``+ packed bias``] becomes ``Gemm(x, packed weight[, packed
    bias], transB=1)``, as MXNet's exporter writes a FullyConnected over packed parameters (the graph is read for its
    structure only: matching splits such a Gemm into one linear node per parameter)."""
    producer = {out: node for node in graph.node for out in node.output}
    consumers = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    for node in [n for n in graph.node if n.op_type == "MatMul"]:
        transpose = producer.get(node.input[1])
        if transpose is None or transpose.op_type != "Transpose" or len(_params_behind(transpose.input[0], producer,
                                                                                       params)) < 2:
            continue
        adds = consumers.get(node.output[0], [])
        bias = None
        if len(adds) == 1 and adds[0].op_type == "Add":
            other = [v for v in adds[0].input if v != node.output[0]]
            bias = other[0] if len(other) == 1 and len(_params_behind(other[0], producer, params)) >= 2 else None
        inputs = [node.input[0], transpose.input[0]] + ([bias] if bias else [])
        output = adds[0].output[0] if bias else node.output[0]
        gemm = onnx.helper.make_node("Gemm", inputs, [output], name=node.name, transB=1)
        position = list(graph.node).index(node)
        graph.node.remove(node)
        if bias:
            graph.node.remove(adds[0])
        graph.node.insert(position, gemm)


def _params_behind(value: str, producer: dict, params: set) -> set:
    """The parameters ``value`` is made of through plumbing ops (reshapes, concatenations)."""
    found, stack, seen = set(), [value], set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in params:
            found.add(name)
        elif name in producer and producer[name].op_type in _PLUMBING:
            node = producer[name]
            stack.extend(node.input if node.op_type == "Concat" else node.input[:1])
    return found
