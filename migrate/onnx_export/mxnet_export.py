"""MXNet's ONNX export of a model MXNet holds (``LiveSource.onnx``), with parameter names kept.

``mx.onnx.export_model`` writes initializers named after the MXNet parameters. While it runs, its converters are
patched: weights are stored as raw bytes (its ``make_tensor(vals=...)`` takes minutes per few million floats with the
pure-python protobuf), or, structure-only (the default), parameters of more than one element become initializers
with shape and dtype and no bytes (``structure_only``); ``mxnet_converters`` replaces the converters MXNet 1.9.1 lacks
or gets wrong. The graph is then made static (``simplify``).
"""
from __future__ import annotations

import collections
import contextlib
import io
import os
import tempfile
import warnings

import numpy as np

from mxformats.optional import import_mxnet

from migrate.errors import ExportError, InputShapeError, first_line
from migrate.onnx_export.mxnet_converters import mxnet_converters
from migrate.onnx_export.simplify import simplify_graph
from migrate.onnx_export.structure_only import shape_only_tensor

__all__ = ["export_mxnet"]


def export_mxnet(source, shapes, dtypes, *, with_weights=False, progress=None):
    """Return the ONNX ``ModelProto`` of an MXNet model, initializers named after MXNet parameters.

    Args:
        source: the model, a ``LiveSource`` (``migrate.source.load_mxnet``).
        shapes: one shape per data input.
        dtypes: one numpy dtype per data input.
        with_weights: False (default): parameters of more than one element carry shape and dtype only
            (``shape_only_tensor``); True: their values too.
        progress: optional callable ``progress(1)`` called after each MXNet node is converted.

    Returns:
        An ``onnx.ModelProto``.

    Raises:
        InputShapeError: the shapes do not fit the model.
        ExportError: MXNet's exporter has no translation for an op (names it).
        MXNetRequiredError: MXNet is not installed (its exporter runs MXNet).

    Examples:
        >>> shapes, dtypes = [(1, 3, 32, 32)], [np.float32]
        >>> model = export_mxnet(load_mxnet(net, shapes, dtypes), shapes, dtypes)  # doctest: +SKIP
    """
    mx = import_mxnet("exporting the MXNet graph to ONNX (name_mapping's MXNet side)")
    import onnx
    static = _check_mx_shapes(source, shapes)
    params = {k: v if with_weights or _size(v.shape) <= 1 else _ShapeOnly(v) for k, v in source.params.items()}
    with tempfile.TemporaryDirectory() as tmp, _raw_initializers(with_weights, source.symbol), \
            mxnet_converters(static) as opset, _counted_converters(progress), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = os.path.join(tmp, "mx.onnx")
        try:
            mx.onnx.export_model(source.symbol, params, shapes, list(dtypes), path)
        except AttributeError as exc:
            raise ExportError(f"MXNet ONNX export failed: {first_line(exc)}; an op of this model has no ONNX "
                              f"translation in mxnet {mx.__version__} (see mx.onnx's operator support "
                              f"matrix); replace that op or write the mapping by hand") from None
        except Exception as exc:
            raise ExportError(f"MXNet ONNX export failed: {first_line(exc)}; check the model exports with "
                              f"mx.onnx.export_model on its own, then retry") from None
        model = onnx.load(path, load_external_data=False)
    for entry in model.opset_import:  # mx.onnx's make_model stamps onnx's newest opset on the model
        if entry.domain in ("", "ai.onnx"):
            entry.version = opset
    simplify_graph(model, source.params)
    return model


def _check_mx_shapes(source, shapes) -> dict:
    """InputShapeError unless the model takes ``shapes``; else the static output shapes of its nodes whose name is
    unique (the exporter renames a repeated name, so its shape could be another node's), from the one shape
    inference that checks them."""
    if len(shapes) != len(source.input_names):
        raise InputShapeError(f"MXNet model: expected {len(source.input_names)} input shape(s) for inputs "
                              f"{source.input_names}, received {len(shapes)}: {shapes}; give one shape per input")
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # mxnet prints every argument shape on failure
            found = source.node_output_shapes(shapes)
    except Exception as exc:
        raise InputShapeError(f"MXNet model rejected input shapes {shapes} for inputs {source.input_names}: "
                              f"{first_line(exc)}; give the shapes the model accepts") from None
    names = [node["name"] for node in source.document["nodes"]]
    repeated = {name for name, count in collections.Counter(names).items() if count > 1}
    return {name: shape for name, shape in found.items() if name not in repeated and all(d > 0 for d in shape)}


@contextlib.contextmanager
def _raw_initializers(with_weights: bool, root):
    """Have MXNet's exporter store weights as raw bytes (with the pure-python protobuf installed here, its
    ``make_tensor(vals=array.flatten().tolist())`` takes minutes per few million floats: resnet18 140 s), or, when
    ``with_weights`` is False, parameters of more than one element as shape-only initializers. ``root`` is the
    symbol being exported."""
    import onnx.helper
    import onnx.mapping
    from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph
    originals = {v: ops["null"] for v, ops in MXNetGraph.registry_.items() if "null" in ops}

    def convert_null(node, **kwargs):
        name = node["name"]
        if kwargs["is_input"] is not False:
            return originals[max(originals)](node, **kwargs)
        array = kwargs["weights"][name]
        data_type = onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(array.dtype)]
        if isinstance(array, _ShapeOnly):
            kwargs["initializer"].append(shape_only_tensor(name, data_type, array.shape))
        else:
            array = np.ascontiguousarray(array)
            kwargs["initializer"].append(onnx.helper.make_tensor(name, data_type, array.shape, array.tobytes(),
                                                                 raw=True))
        return [onnx.helper.make_tensor_value_info(name, data_type, array.shape)], (np.dtype(array.dtype),)

    def to_numpy(weights):  # MXNet's own copies every value with asnumpy(); stand-ins pass as they are
        return {k.replace("arg:", "").replace("aux:", ""): v if isinstance(v, _ShapeOnly) else v.asnumpy()
                for k, v in weights.items()}

    import mxnet as mx
    original_list_inputs, listed = mx.sym.Symbol.list_inputs, []

    def list_inputs(symbol):  # the exporter asks once per parameter (resnet50: 600 calls, a third of its time);
        if symbol is not root:  # only the model's symbol (alive throughout) is cached
            return original_list_inputs(symbol)
        if not listed:
            listed.append(original_list_inputs(symbol))
        return list(listed[0])

    original_to_numpy = MXNetGraph.convert_weights_to_numpy
    for v in originals:
        MXNetGraph.registry_[v]["null"] = convert_null
    MXNetGraph.convert_weights_to_numpy = staticmethod(to_numpy)
    mx.sym.Symbol.list_inputs = list_inputs
    try:
        yield
    finally:
        mx.sym.Symbol.list_inputs = original_list_inputs
        MXNetGraph.convert_weights_to_numpy = original_to_numpy
        for v, func in originals.items():
            MXNetGraph.registry_[v]["null"] = func


@contextlib.contextmanager
def _counted_converters(progress):
    """Call ``progress(1)`` after every node MXNet's exporter converts (nothing when ``progress`` is None)."""
    if progress is None:
        yield
        return
    from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph
    saved = {v: dict(ops) for v, ops in MXNetGraph.registry_.items()}

    def counted(func):
        def convert(*args, **kwargs):
            out = func(*args, **kwargs)
            progress(1)
            return out
        return convert

    for v, ops in MXNetGraph.registry_.items():
        ops.update({op: counted(func) for op, func in ops.items()})
    try:
        yield
    finally:
        for v, ops in saved.items():  # in place: the other contexts hold these dicts
            MXNetGraph.registry_[v].clear()
            MXNetGraph.registry_[v].update(ops)


class _ShapeOnly:
    """Stands in for a parameter in MXNet's exporter: its shape and dtype, no values."""

    def __init__(self, array):
        self.shape, self.dtype = tuple(array.shape), np.dtype(array.dtype)


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))
