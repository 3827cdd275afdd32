"""``LiveSource``: a model MXNet holds, an ``mx.sym.Symbol`` and its ``mx.nd.NDArray`` parameters.

MXNet answers for it: its shape inference gives the nodes' shapes, its ONNX exporter (``migrate.onnx_export``) gives
the graph matching reads, and an executor bound to the symbol's internal outputs gives the nodes' outputs a torch
model is compared with (``MXNetNodeOutputs``; ``mxnet_executor`` serves ``check_training`` too). The ways of reading
one are its subclasses: ``BlockSource`` (a Gluon block) and ``CheckpointSource`` (symbol/params files through MXNet).

Examples:
    >>> source = load_mxnet(net, [(1, 4)], [np.float32])  # doctest: +SKIP
    >>> source.node_output_shapes([(1, 4)])["dense0_fwd"]  # doctest: +SKIP
    (1, 10)
"""
from __future__ import annotations

import json
import os

import numpy as np

from migrate.errors import InputShapeError
from migrate.onnx_export.mxnet_export import export_mxnet
from migrate.source.base import EXPORTED_WITH_MXNET, MXNET, MxSource
from migrate.source.packed import packed_slices, packing_consumers
from mxformats.symbol import MODE_OPS, forced_training

__all__ = ["LiveSource", "MXNetNodeOutputs", "forced_training_graph", "mxnet_executor", "mxnet_node_shapes"]


class LiveSource(MxSource):
    """A model MXNet holds (see ``MxSource`` for the arguments).

    Args:
        symbol: The output ``mx.sym.Symbol`` (its data inputs are the variables named in ``input_names``).
        params: Parameter name -> ``mx.nd.NDArray``.
    """

    reader = EXPORTED_WITH_MXNET
    compared_with = MXNET

    def __init__(self, symbol, params: dict, input_names: list, notes=(), *, block=None, files=None):
        super().__init__(params, input_names, notes, block=block, files=files)
        self.symbol = symbol

    def _document(self) -> dict:
        return json.loads(self.symbol.tojson())

    @property
    def aux_names(self) -> list:
        return self.symbol.list_auxiliary_states()

    def node_output_shapes(self, shapes, *, partial=False) -> dict:
        """``{MXNet node name: output shape}`` of every single-output node, from MXNet's shape inference on the data
        input ``shapes``; MXNet's error when they do not fit (``partial``: shapes left open read 0).

        Examples:
            >>> load_mxnet(net, [(1, 4)], [np.float32]).node_output_shapes([(1, 4)])["dense0_fwd"]  # doctest: +SKIP
            (1, 10)
        """
        internals = self.symbol.get_internals()
        infer = internals.infer_shape_partial if partial else internals.infer_shape
        _, out_shapes, _ = infer(**self._known_shapes(internals, dict(zip(self.input_names, shapes))))
        return {output[:-len("_output")]: tuple(int(d) for d in shape)
                for output, shape in zip(internals.list_outputs(), out_shapes or [])
                if output.endswith("_output") and shape is not None}

    def node_shapes(self, inputs: list, shapes, dtypes) -> list:
        """Each node's output shapes (a list per node of ``document``), from MXNet's partial shape inference on the
        data ``inputs`` of ``shapes``.

        Raises:
            InputShapeError: MXNet rejects the shapes (its message).
        """
        given = dict(zip(inputs, shapes))
        internals = self.symbol.get_internals()
        try:
            _, out_shapes, _ = internals.infer_shape_partial(**self._known_shapes(internals, given))
        except Exception as exc:  # MXNet raises MXNetError with its own message
            raise InputShapeError(f"the MXNet graph rejects input shapes {given}: {str(exc).splitlines()[0]}; "
                                  f"give the shapes the model accepts") from None
        return mxnet_node_shapes(self.document["nodes"], internals.list_outputs(),
                                 [tuple(s) if s else None for s in out_shapes])

    def _known_shapes(self, internals, given: dict) -> dict:
        """The shapes of the parameters and the ``given`` inputs that the graph ``internals`` reads."""
        reads = set(internals.list_inputs())
        return {k: v for k, v in {**{k: v.shape for k, v in self.params.items()}, **given}.items() if k in reads}

    def onnx(self, shapes, dtypes, *, with_weights=False, progress=None):
        """MXNet's ONNX export of the symbol (``migrate.onnx_export.export_mxnet``)."""
        return export_mxnet(self, shapes, dtypes, with_weights=with_weights, progress=progress)

    def node_outputs(self, shapes, dtypes, mapping) -> "MXNetNodeOutputs":
        """The nodes' outputs as MXNet computes them (``MXNetNodeOutputs``)."""
        return MXNetNodeOutputs(self, shapes)

    def live(self, what: str) -> "LiveSource":
        """This source: MXNet holds it already."""
        return self


class MXNetNodeOutputs:
    """The outputs of a ``LiveSource``'s nodes in eval mode, MXNet computing them (see ``MxSource.node_outputs``).

    A parameter MXNet packs with others into one ``FullyConnected`` (GluonNLP's query/key/value) is first read by a
    packing op: its node's output is its slice of that ``FullyConnected``'s output (``packed.packed_slices``, the
    packing run on coded values by MXNet); a packing op whose slice cannot be told (gluon.rnn's weight blob) is skipped.
    A graph with ops a recorded Block forced into training mode runs in training mode, its other ops made to compute as
    in eval mode (``forced_training_graph``).

    Args:
        source: The model.
        shapes: The data input shapes (the sizes of the outputs).
    """

    missing = "MXNet output not found"

    def __init__(self, source: LiveSource, shapes):
        self.source, self.shapes = source, shapes
        forced = forced_training_graph(source.document)
        self.symbol = source.symbol if forced is None else _symbol(forced)
        self.train_mode = forced is not None
        self.packed = packing_consumers(source.document)
        self.slices = packed_slices(source.document, source.params, self._packed_value) if self.packed else {}

    def output_sizes(self, ops) -> dict:
        """Op -> elements of its output, from MXNet's shape inference (``{}`` where it fails); a packed part counts
        its whole ``FullyConnected`` output."""
        try:
            size = self.source.node_output_shapes(self.shapes, partial=True)
        except Exception:  # shapes unknown: verification holds every output at once
            return {}
        out = {op: self.slices[op].name if op in self.slices else op for op in dict.fromkeys(ops)}
        return {op: int(np.prod(size[node], dtype=np.int64)) for op, node in out.items() if size.get(node)}

    def skip_note(self, op: str) -> str | None:
        """Why the output of ``op`` is not compared on its own: MXNet packs the parameter with others through it, and
        no slice of a ``FullyConnected`` output is that parameter's alone."""
        if op in self.packed and op not in self.slices:
            return f"skipped: MXNet packs the tensor with others through {self.packed[op]} (checked at the final output)"
        return None

    def run(self, inputs: list, pairs: list, *, with_final=True) -> tuple[list, list]:
        """(the output of each pair's op, the final outputs when ``with_final``), as numpy arrays, on the numpy
        ``inputs``; None where the graph has no such output."""
        import mxnet as mx
        values = {**self.source.params,
                  **{n: mx.nd.array(x, dtype=x.dtype) for n, x in zip(self.source.input_names, inputs)}}
        ops = [self.slices[p[0]].name if p[0] in self.slices else p[0] for p in pairs]
        executor, wanted = mxnet_executor(self.symbol, values, ops, with_final=with_final)
        outs = [o.asnumpy() for o in executor.forward(is_train=self.train_mode)]
        del executor
        found = dict(zip(wanted, outs))
        mine = [found.get(op) for op in ops]
        return [out[..., self.slices[p[0]].indices] if out is not None and p[0] in self.slices else out
                for p, out in zip(pairs, mine)], outs[len(wanted):]

    def _packed_value(self, node: int, output: int, values: dict):
        """Output ``output`` of ``node`` with the parameters set to ``values`` (numpy), MXNet computing it.

        Raises:
            KeyError: the node has several outputs, or reads more than ``values``.
        """
        import mxnet as mx
        name = self.source.document["nodes"][node]["name"]
        arrays = {k: mx.nd.array(v, dtype=v.dtype) for k, v in values.items()}
        executor, exposed = mxnet_executor(self.source.symbol, arrays, [name] if output == 0 else [], with_final=False)
        if exposed != [name]:
            raise KeyError(f"{name} output {output}")
        return executor.forward(is_train=False)[0].asnumpy()


def forced_training_graph(document: dict) -> dict | None:
    """``document`` (a symbol JSON document) as MXNet computes it in training mode the way the graph computes in eval
    mode, where an op is marked to compute as in training whatever the mode (``mxformats.symbol.FORCED_TRAINING``: a
    recorded Block's ``autograd.train_mode()``, GluonCV's GroupNorm); None where none is. The other ops that follow
    the mode compute as in eval in it: a BatchNorm with ``use_global_stats``, a Dropout or an RNN's dropout with
    ``p`` 0 (MXNet moves the running statistics in the backward pass, which verification does not run)."""
    if not any(forced_training(n) for n in document["nodes"]):
        return None
    out = json.loads(json.dumps(document))
    for node in out["nodes"]:
        attrs = node.get("attrs", {})
        if node["op"] not in MODE_OPS or forced_training(node) or attrs.get("mode") == "always":
            continue
        if node["op"] in ("Dropout", "RNN"):
            attrs["p"] = "0"
        else:
            attrs["use_global_stats"] = "True"
        node["attrs"] = attrs
    return out


def _symbol(document: dict):
    import mxnet as mx
    return mx.sym.load_json(json.dumps(document))


def mxnet_node_shapes(nodes: list, names: list, shapes: list) -> list:
    """Each node's output shapes (a list per node, in node order) from MXNet's internal outputs.

    Args:
        nodes: the graph's nodes as a symbol JSON lists them.
        names: ``symbol.get_internals().list_outputs()``: every node's outputs, in node order (a variable's own name;
            ``<node>_output``, or ``<node>_output0``, ``<node>_output1``...; or ``<node>_output`` followed by the
            op's own output names: an ``RNN``'s ``<node>_state_output`` and ``<node>_statecell_output`` (an int8
            ``RNN``'s ``<node>_statecell_ouput``), an int8 op's (``_sg_mkldnn_fully_connected``'s too)
            ``<node>_min_output`` and ``<node>_max_output``, quantize_asym's ``<node>_scale`` and ``<node>_shift``,
            ``_sg_mkldnn_conv``'s ``<node>_output_min`` and ``<node>_output_max``).
        shapes: the shape of each of ``names`` (None where unknown).

    Returns:
        ``[[shape, ...], ...]``. Names are not keys: a Gluon block called twice (one Activation reused) makes nodes of
        the same name, so the outputs are read in order.
    """
    out, k = [], 0
    for node in nodes:
        name, mine = node["name"], []
        extra = [f"{name}_{suffix}" for suffix in _named_outputs(node["op"])]
        if node["op"] == "null":
            if k < len(names) and names[k] == name:
                mine, k = [shapes[k]], k + 1
        elif k < len(names) and names[k] == f"{name}_output":
            mine, k = [shapes[k]], k + 1
            while k < len(names) and names[k] in extra:
                mine, k = mine + [shapes[k]], k + 1
        else:
            while k < len(names) and names[k] == f"{name}_output{len(mine)}":
                mine, k = mine + [shapes[k]], k + 1
        out.append(mine)
    return out


def _named_outputs(op: str) -> tuple:
    """The names after ``output`` MXNet gives the other outputs of ``op`` (FListOutputNames)."""
    if op == "RNN":
        return "state_output", "statecell_output"
    if op == "_contrib_quantized_rnn":
        return "state_output", "statecell_ouput"  # sic: MXNet 1.9.1's QuantizedRnnOutputNames
    if op.startswith("_contrib_quantized_") or op == "_sg_mkldnn_fully_connected":
        return "min_output", "max_output"
    if op == "_contrib_quantize_asym":
        return "scale", "shift"
    return ("output_min", "output_max") if op.startswith("_sg_mkldnn_") else ()


def mxnet_executor(symbol, values: dict, ops, *, with_final=True, grad_req="null", args_grad=None) -> tuple:
    """An MXNet executor whose outputs are the outputs of ``ops`` (those the graph has), then the final outputs.

    Args:
        symbol: the model's output symbol.
        values: name -> ``mx.nd.NDArray`` for every argument and auxiliary state (inputs included); the executor
            reads and writes these arrays themselves.
        ops: op names whose ``<op>_output`` to expose.
        with_final: expose the final outputs too (always, when none of ``ops`` is found).
        grad_req: MXNet's ``grad_req`` (a string or a dict name -> string).
        args_grad: name -> gradient array, for a backward pass.

    Returns:
        ``(executor, the ops exposed)``: the first ``len(ops exposed)`` outputs are theirs.

    Examples:
        >>> executor, exposed = mxnet_executor(source.symbol, values, ["conv0_fwd"])  # doctest: +SKIP
    """
    import mxnet as mx
    internals = symbol.get_internals()
    available = set(internals.list_outputs())
    wanted = [op for op in dict.fromkeys(ops) if f"{op}_output" in available]
    finals = list(symbol) if with_final or not wanted else []
    group = mx.sym.Group([internals[f"{op}_output"] for op in wanted] + finals)
    saved = os.environ.get("MXNET_SUBGRAPH_BACKEND")
    os.environ["MXNET_SUBGRAPH_BACKEND"] = "NONE"  # the MKLDNN subgraph pass breaks binding internal outputs
    try:
        executor = group.bind(mx.cpu(), args={k: values[k] for k in group.list_arguments()}, args_grad=args_grad,
                              aux_states={k: values[k] for k in group.list_auxiliary_states()}, grad_req=grad_req)
    finally:
        if saved is None:
            del os.environ["MXNET_SUBGRAPH_BACKEND"]
        else:
            os.environ["MXNET_SUBGRAPH_BACKEND"] = saved
    return executor, wanted
