"""Export an MXNet model and a PyTorch model to ONNX in memory, with parameter names kept.

MXNet goes through ``mx.onnx.export_model`` (initializers named after the MXNet parameters); PyTorch through
``torch.onnx.export(dynamo=False, training=TRAINING, do_constant_folding=False)`` (initializers named by
``state_dict`` key; the default eval export folds BatchNorm into Conv and loses the names).

By default both exports are structure-only: every parameter of more than one element is an initializer with its
name, shape and dtype but no bytes (``data_location`` EXTERNAL, location ``STRUCTURE_ONLY``), which is all that
matching reads. The export then costs the same for a model of 1 MB or 10 GB, and never meets protobuf's 2 GB limit.
``with_weights=True`` exports the values as well.

Both exports are then made static (``migrate.mapping.simplify``): the input shapes are fixed, so the shape
arithmetic each exporter writes is folded into constants; no-op, repeated and reshape-chain nodes go.
"""
from __future__ import annotations

import collections
import contextlib
import numbers
import io
import json
import os
import tempfile
import warnings
from dataclasses import dataclass, field

import numpy as np

from mxformats.optional import import_mxnet
from mxformats.symbol import symbol_file_problem

from migrate.errors import ExportError, InputFileError, InputShapeError, ModelTypeError
from migrate.mapping import module_checkpoint
from migrate.mapping.onnx_converters import mxnet_converters
from migrate.mapping.simplify import simplify_graph

__all__ = ["MxSource", "EXPORTED_WITH_MXNET", "READ_WITHOUT_MXNET", "STRUCTURE_ONLY", "export_mxnet", "export_torch",
           "load_mxnet", "node_output_shapes", "normalize_shapes"]

EXPORTED_WITH_MXNET = "exported with MXNet"
"""``MxSource.reader`` of a model MXNet itself read (a Gluon block, or files through ``mx.sym.load``)."""
READ_WITHOUT_MXNET = "MXNet graph read from symbol.json without MXNet"
"""``MxSource.reader`` of files read by ``file_source.read_mxnet_files`` (no MXNet involved)."""
STRUCTURE_ONLY = "structure-only: weights not exported"
"""The external-data location of an initializer exported without its bytes (``with_weights=False``)."""


@dataclass
class MxSource:
    """An MXNet model as a symbol plus its parameter values, whatever form the user gave it in.

    Attributes:
        symbol: the output symbol (inputs are variables named in ``input_names``): an ``mx.sym.Symbol``, or a
            ``mxformats.symbol.SymbolGraph`` when the files were read without MXNet (``file_source``).
        params: parameter name -> ``mx.nd.NDArray``, or ``numpy.ndarray`` when read without MXNet (arguments and
            auxiliary states, no ``arg:``/``aux:``).
        input_names: the data inputs of ``symbol`` in order.
        notes: what was changed on the way in (loss heads cut from a Module checkpoint), one line each.
        reader: which path read the model: ``EXPORTED_WITH_MXNET`` or ``READ_WITHOUT_MXNET`` (reports say it).
    """

    symbol: object
    params: dict
    input_names: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    reader: str = EXPORTED_WITH_MXNET

    @property
    def without_mxnet(self) -> bool:
        """True when the model was read from its files without MXNet (``symbol`` is a ``SymbolGraph``)."""
        return self.reader == READ_WITHOUT_MXNET


def normalize_shapes(input_shapes, input_dtypes=None) -> tuple[list[tuple], list[np.dtype]]:
    """Return ``(shapes, dtypes)`` as lists, from one shape tuple or a list of them.

    Args:
        input_shapes: ``(1, 3, 32, 32)`` or ``[(1, 3, 32, 32), (1, 10)]``.
        input_dtypes: None (float32 for all), one dtype, or one per input.

    Returns:
        A list of shape tuples and a list of numpy dtypes of the same length.

    Raises:
        InputShapeError: a shape is empty or holds something other than positive integers (a float, a bool), the
            shapes are not a tuple or a list of tuples, or a dtype is not one numpy knows.

    Examples:
        >>> normalize_shapes((1, 3, 8, 8))
        ([(1, 3, 8, 8)], [dtype('float32')])
    """
    def is_dim(d):
        return isinstance(d, (int, np.integer)) and not isinstance(d, bool)
    fix = "pass one shape tuple of positive integers such as (1, 3, 32, 32), or a list of them"
    shapes = input_shapes
    if isinstance(shapes, (tuple, list)) and shapes and all(isinstance(d, (numbers.Number, np.number)) for d in shapes):
        shapes = [shapes]  # one shape
    if not isinstance(shapes, (tuple, list)) or not shapes or not all(isinstance(s, (tuple, list)) for s in shapes):
        raise InputShapeError(f"input_shapes: expected a tuple of positive integers or a list of them, received "
                              f"{input_shapes!r:.80}; {fix}")
    shapes = [tuple(s) for s in shapes]
    for s in shapes:
        bad = [d for d in s if not (is_dim(d) and d > 0)]
        if not s or bad:
            what = f"{bad[0]!r:.20} ({type(bad[0]).__name__}) is not one" if bad else "it is empty"
            raise InputShapeError(f"input shape {s!r:.80}: expected a tuple of positive integers, {what}; received "
                                  f"{input_shapes!r:.80}; {fix}")
    dtypes = input_dtypes if isinstance(input_dtypes, (list, tuple)) else [input_dtypes] * len(shapes)
    if len(dtypes) != len(shapes):
        raise InputShapeError(f"input_dtypes: expected {len(shapes)} dtypes (one per input shape), received "
                              f"{len(dtypes)}; give one dtype per shape or a single dtype for all")
    try:
        return shapes, [np.dtype(d if d is not None else np.float32) for d in dtypes]
    except TypeError as exc:
        raise InputShapeError(f"input_dtypes {input_dtypes!r:.80}: not numpy dtypes ({exc}); pass e.g. 'float32' "
                              f"or 'int64'") from None


def load_mxnet(mx_model, shapes, dtypes) -> MxSource:
    """Return the symbol and parameters of ``mx_model`` (a HybridBlock or ``(symbol_json, params)`` paths).

    Args:
        mx_model: an initialized ``mxnet.gluon.HybridBlock``, a tuple ``(symbol_json_path, params_path)``, or an
            ``MxSource`` (returned as it is: load the files once and pass the source to each stage).
        shapes: input shapes (used to finish deferred initialization of a block).
        dtypes: input dtypes.

    Returns:
        An ``MxSource``.

    Raises:
        InputFileError: a file is missing or is not an MXNet symbol / params file.
        TypeError: ``mx_model`` is neither form.
        MXNetRequiredError: MXNet is not installed here.

    Examples:
        >>> src = load_mxnet(("net-symbol.json", "net-0000.params"), [(1, 3, 32, 32)], [np.float32])  # doctest: +SKIP
    """
    if isinstance(mx_model, MxSource):
        return mx_model
    mx = import_mxnet("migrate's MXNet side (reading the MXNet model to map, verify or generate it)")
    if isinstance(mx_model, (tuple, list)) and len(mx_model) == 2:
        return _load_mx_files(str(mx_model[0]), str(mx_model[1]))
    if isinstance(mx_model, mx.gluon.HybridBlock):
        return _load_mx_block(mx_model, shapes, dtypes)
    raise ModelTypeError(f"mx_model: expected an initialized mxnet.gluon.HybridBlock or a tuple "
                               f"(symbol_json_path, params_path); received {type(mx_model).__name__}; "
                               f"a plain gluon.Block cannot be exported: make it a HybridBlock")


def _load_mx_files(sym_path: str, params_path: str) -> MxSource:
    import mxnet as mx
    module_checkpoint.check_files_exist(sym_path, params_path)
    try:
        symbol = mx.sym.load(sym_path)
    except Exception as exc:  # mxnet raises MXNetError or json errors; mxformats names what is wrong where it can
        raise InputFileError(f"MXNet symbol file {sym_path!r}: expected a symbol JSON written by "
                             f"HybridBlock.export or Symbol.save; could not parse it "
                             f"({symbol_file_problem(sym_path) or _first_line(exc)})") from None
    try:
        raw = mx.nd.load(params_path)
    except Exception as exc:
        raise InputFileError(f"MXNet params file {params_path!r}: expected an NDArray dict written by "
                             f"HybridBlock.export or mx.nd.save; could not read it ({_first_line(exc)})") from None
    params = module_checkpoint.named_params(raw, params_path)
    symbol, notes = module_checkpoint.cut_loss_heads(symbol, params)
    module_checkpoint.check_params_present(symbol, params, params_path)
    inputs = [n for n in symbol.list_inputs() if n not in params]
    return MxSource(symbol, params, inputs, notes)


def _load_mx_block(block, shapes, dtypes) -> MxSource:
    import mxnet as mx
    names = ["data"] if len(shapes) == 1 else [f"data{i}" for i in range(len(shapes))]
    params = block.collect_params()
    try:
        values = {p.name: p.data() for p in params.values()}
    except mx.gluon.parameter.DeferredInitializationError:
        _forward_block(block, shapes, dtypes)
        values = {p.name: p.data() for p in params.values()}
    except RuntimeError as exc:
        raise ModelTypeError(f"MXNet block {type(block).__name__}: parameters are not initialized "
                                   f"({_first_line(exc)}); call block.initialize() first") from None
    try:
        symbol = block(*[mx.sym.var(n) for n in names])
    except TypeError as exc:
        raise InputShapeError(f"MXNet block {type(block).__name__} does not take {len(names)} input(s) "
                              f"({_first_line(exc)}); give one shape per input of its hybrid_forward") from None
    if symbol is None or isinstance(symbol, (list, tuple)):
        symbol = mx.sym.Group(_output_symbols(block, symbol))
    return MxSource(symbol, values, names)


def _output_symbols(block, outputs, where: tuple = ()) -> list:
    """The symbols a block returned, nested tuples flattened in order (as ``HybridBlock.export`` writes them).

    Raises:
        ModelTypeError: an output is None (names its position): a graph holds only arrays.
    """
    if isinstance(outputs, (list, tuple)):
        return [symbol for i, out in enumerate(outputs) for symbol in _output_symbols(block, out, where + (i,))]
    if outputs is None:
        raise ModelTypeError(f"MXNet block {type(block).__name__} returns None as its output"
                             f"{''.join(f'[{i}]' for i in where)}; an MXNet graph holds arrays only: wrap the block "
                             f"in a HybridBlock whose hybrid_forward returns its arrays without the None")
    return [outputs]


def _forward_block(block, shapes, dtypes) -> None:
    import mxnet as mx
    try:
        block(*[mx.nd.zeros(s, dtype=d) for s, d in zip(shapes, dtypes)])
    except Exception as exc:
        raise InputShapeError(f"MXNet block {type(block).__name__} rejected input shapes {shapes}: "
                              f"{_first_line(exc)}; give the shapes the model accepts") from None


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


def shape_only_tensor(name: str, data_type: int, shape):
    """An ONNX initializer with ``name``, ``data_type`` and ``shape`` but no bytes (location ``STRUCTURE_ONLY``).

    Examples:
        >>> t = shape_only_tensor("fc.weight", 1, (4096, 4096)); t.ByteSize() < 100
        True
    """
    import onnx
    tensor = onnx.TensorProto(name=name, data_type=data_type, dims=list(shape),
                              data_location=onnx.TensorProto.EXTERNAL)
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", STRUCTURE_ONLY
    return tensor


def export_mxnet(source: MxSource, shapes, dtypes, *, with_weights=False, progress=None):
    """Return the ONNX ``ModelProto`` of an MXNet model, initializers named after MXNet parameters.

    Args:
        source: the model as loaded by ``load_mxnet``.
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
        ModelTypeError: ``source`` was read without MXNet (``file_source``): ``name_mapping`` exports such a source
            with ``translated_export.export_translated``.

    Examples:
        >>> shapes, dtypes = [(1, 3, 32, 32)], [np.float32]
        >>> model = export_mxnet(load_mxnet(net, shapes, dtypes), shapes, dtypes)  # doctest: +SKIP
    """
    mx = import_mxnet("exporting the MXNet graph to ONNX (name_mapping's MXNet side)")
    if source.without_mxnet:
        raise ModelTypeError(f"export_mxnet: the model was read without MXNet ({source.reader}); export it with "
                             f"migrate.mapping.translated_export.export_translated (name_mapping does)")
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
            raise ExportError(f"MXNet ONNX export failed: {_first_line(exc)}; an op of this model has no ONNX "
                              f"translation in mxnet {mx.__version__} (see mx.onnx's operator support "
                              f"matrix); replace that op or write the mapping by hand") from None
        except Exception as exc:
            raise ExportError(f"MXNet ONNX export failed: {_first_line(exc)}; check the model exports with "
                              f"mx.onnx.export_model on its own, then retry") from None
        model = onnx.load(path, load_external_data=False)
    for entry in model.opset_import:  # mx.onnx's make_model stamps onnx's newest opset on the model
        if entry.domain in ("", "ai.onnx"):
            entry.version = opset
    simplify_graph(model, source.params)
    return model


def node_output_shapes(source: MxSource, shapes, *, partial=False) -> dict:
    """``{MXNet node name: output shape}`` of every single-output node of ``source``, from MXNet's shape inference
    on the data input ``shapes``; MXNet's error when they do not fit (``partial``: shapes left open read 0).

    Examples:
        >>> node_output_shapes(load_mxnet(net, [(1, 4)], [np.float32]), [(1, 4)])["dense0_fwd"]  # doctest: +SKIP
        (1, 10)
    """
    internals = source.symbol.get_internals()
    known = {k: v.shape for k, v in source.params.items()}
    infer = internals.infer_shape_partial if partial else internals.infer_shape
    _, out_shapes, _ = infer(**known, **dict(zip(source.input_names, shapes)))
    return {output[:-len("_output")]: tuple(int(d) for d in shape)
            for output, shape in zip(internals.list_outputs(), out_shapes or [])
            if output.endswith("_output") and shape is not None}


def _check_mx_shapes(source: MxSource, shapes) -> dict:
    """InputShapeError unless the model takes ``shapes``; else the static output shapes of its nodes whose name is
    unique (the exporter renames a repeated name, so its shape could be another node's), from the one shape
    inference that checks them."""
    if len(shapes) != len(source.input_names):
        raise InputShapeError(f"MXNet model: expected {len(source.input_names)} input shape(s) for inputs "
                              f"{source.input_names}, received {len(shapes)}: {shapes}; give one shape per input")
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # mxnet prints every argument shape on failure
            found = node_output_shapes(source, shapes)
    except Exception as exc:
        raise InputShapeError(f"MXNet model rejected input shapes {shapes} for inputs {source.input_names}: "
                              f"{_first_line(exc)}; give the shapes the model accepts") from None
    names = [node["name"] for node in json.loads(source.symbol.tojson())["nodes"]]
    repeated = {name for name, count in collections.Counter(names).items() if count > 1}
    return {name: shape for name, shape in found.items() if name not in repeated and all(d > 0 for d in shape)}


def export_torch(module, shapes, dtypes, *, with_weights=False, progress=None):
    """Return the ONNX ``ModelProto`` of a torch module, initializers named by ``state_dict`` key.

    Args:
        module: a ``torch.nn.Module``.
        shapes: one shape per input.
        dtypes: one numpy dtype per input (integer dtypes become ``torch.long``).
        with_weights: False (default): exported with ``export_params=False``, then the ``state_dict`` entries of
            more than one element become shape-only initializers (``shape_only_tensor``) and the others carry their
            values, as in a full export; True: every value.
        progress: optional callable ``progress(1)`` called after each module's forward during the trace.

    Returns:
        An ``onnx.ModelProto`` exported in training mode without constant folding, so that BatchNorm stays a
        node of its own. The module's training flag and its state (running statistics the training-mode trace
        updates) are restored afterwards.

    Raises:
        InputShapeError: the module rejects the inputs.
        ExportError: ``torch.onnx.export`` fails (names the op when torch does).

    Examples:
        >>> model = export_torch(torchvision.models.resnet18(), [(1, 3, 64, 64)], [np.float32])  # doctest: +SKIP
    """
    import onnx
    import torch
    if not isinstance(module, torch.nn.Module):
        raise ModelTypeError(f"torch_model: expected a torch.nn.Module, received {type(module).__name__}; "
                                   f"build the model first (e.g. torchvision.models.resnet18())")
    args = tuple(_torch_input(s, d) for s, d in zip(shapes, dtypes))
    was_training = module.training
    buf, failure = io.BytesIO(), None
    buffers = dict(module.named_buffers())  # a training-mode trace updates BatchNorm running statistics
    saved = {k: v.detach().clone() for k, v in buffers.items()}
    hookable = progress is not None and not isinstance(module, torch.jit.ScriptModule)  # TorchScript: no hooks
    def counted(*_):  # returns None: a forward hook's return value would replace the module's output
        progress(1)
    hooks = [m.register_forward_hook(counted) for m in module.modules()] if hookable else []
    try:
        with warnings.catch_warnings(), _shape_inference_without_values(not with_weights):
            warnings.simplefilter("ignore")
            torch.onnx.export(module, args, buf, dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, export_params=with_weights)
    except Exception as exc:
        failure = exc
    finally:
        for hook in hooks:
            hook.remove()
        module.train(was_training)
        with torch.no_grad():
            for key, value in saved.items():
                buffers[key].copy_(value)
    if failure is not None:
        _check_torch_shapes(module, args, shapes)  # the model's own error first: shapes it does not take
        raise ExportError(f"torch ONNX export of {type(module).__name__} failed: {_first_line(failure)}; if an "
                          f"op is unsupported, replace it or register a symbolic (torch.onnx."
                          f"register_custom_op_symbolic)") from None
    model = onnx.load_from_string(buf.getvalue())
    state = module.state_dict(keep_vars=True)
    if not with_weights:
        _state_as_initializers(model, state)
    simplify_graph(model, state)
    return model


@contextlib.contextmanager
def _shape_inference_without_values(active: bool):
    """Have torch's exporter infer shapes from the parameters' types, not their values: it otherwise serialises
    every weight into an ONNX proto for onnx's shape inference (268M parameters: 2.5 s and 0.7 GiB), even with
    ``export_params=False``. The parameters are typed graph inputs, so every shape is still inferred."""
    if not active:
        yield
        return
    import torch
    original = torch._C._jit_pass_onnx_graph_shape_type_inference
    torch._C._jit_pass_onnx_graph_shape_type_inference = lambda graph, params, opset: original(graph, {}, opset)
    try:
        yield
    finally:
        torch._C._jit_pass_onnx_graph_shape_type_inference = original


def _check_torch_shapes(module, args, shapes) -> None:
    """Run ``module`` in eval mode on ``args``: InputShapeError when it rejects them (called once an export failed:
    a successful export has run the model already)."""
    import torch
    was_training = module.training
    try:
        with torch.no_grad():
            module.eval()(*args)
    except Exception as exc:
        raise InputShapeError(f"torch model {type(module).__name__} rejected input shapes {shapes}: "
                              f"{_first_line(exc)}; give the shapes the model accepts") from None
    finally:
        module.train(was_training)


def _state_as_initializers(model, state: dict):
    """Turn the graph inputs an ``export_params=False`` export makes of ``state`` into initializers, as a full
    export has them: shape-only above one element, with the value otherwise."""
    import onnx.numpy_helper
    import torch
    graph = model.graph
    moved = [i for i in graph.input if i.name in state]
    kept = [i for i in graph.input if i.name not in state]
    for value_info in moved:
        tensor = state[value_info.name].detach()
        if tensor.numel() <= 1 and tensor.dtype != torch.bfloat16:  # numpy has no bfloat16
            graph.initializer.append(onnx.numpy_helper.from_array(tensor.cpu().numpy(), value_info.name))
        else:
            graph.initializer.append(shape_only_tensor(value_info.name, value_info.type.tensor_type.elem_type,
                                                       tuple(tensor.shape)))
    del graph.input[:]
    graph.input.extend(kept)
    return model


def _torch_input(shape, dtype):
    import torch
    if np.issubdtype(dtype, np.integer):
        return torch.zeros(shape, dtype=torch.long)
    return torch.zeros(shape, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype)


def _first_line(exc: BaseException) -> str:
    """The message of ``exc`` in one line: MXNet's C++ errors put a stack trace first and the message last."""
    text = [line for line in str(exc).strip().splitlines() if line.strip()]
    if text and text[0].startswith("Traceback") and any("Error:" in line for line in text):
        text = [next(line for line in reversed(text) if "Error:" in line)]
    return text[0][:300] if text else type(exc).__name__

