"""``name_mapping``: export both models, build their parameter graphs and match them into a ``NameMapping``."""
from __future__ import annotations

from migrate.arguments import normalize_shapes
from migrate.mapping.graph import param_graph
from migrate.mapping.match import match_graphs
from migrate.mapping.table import NameMapping
from migrate.onnx_export.torch_export import export_torch
from migrate.source.reading import model_source

__all__ = ["name_mapping"]


def name_mapping(mx_model, torch_model, input_shapes, *, input_dtypes=None, progress=None) -> NameMapping:
    """Return the mapping MXNet parameter name -> torch ``state_dict`` key, found from both graphs' structure.

    Args:
        mx_model: an initialized Gluon ``HybridBlock``, a tuple ``(symbol_json_path, params_path)`` or an
            ``MxSource`` (``migrate.source``).
        torch_model: the ``torch.nn.Module`` to carry the parameters to.
        input_shapes: one input shape tuple, or a list of them for several inputs.
        input_dtypes: None (float32), one dtype, or one per input; integer inputs become ``torch.long``.
        progress: optional callable ``progress(1)``, called per MXNet node exported and per torch module traced.

    Both models are exported structure-only (``MxSource.onnx``, ``migrate.onnx_export``): shapes and dtypes, no
    weight bytes, so the time and memory of mapping do not grow with the size of the weights. Files read without
    MXNet (MXNet not installed, or ``MIGRATE_WITHOUT_MXNET=1``) have their graph exported through its torch
    translation instead of MXNet's exporter (``migrate.source.FileSource``).

    Returns:
        A ``NameMapping`` covering every parameter and buffer; ``.ok`` is False when anything is unmatched or a
        matched pair differs in attributes (``.differences`` says what, with names on both sides). ``.notes`` says
        what was cut from a Module checkpoint's graph (loss heads, label inputs).

    Raises:
        InputShapeError: a model rejects the input shapes.
        InputFileError: a symbol or params file is missing or not what it claims.
        ExportError: an ONNX export fails (names the op).
        ModelTypeError: a model is of an unsupported type.

    Examples:
        >>> from mxnet.gluon.model_zoo import vision
        >>> net = vision.resnet18_v1(); net.initialize()
        >>> m = name_mapping(net, torchvision.models.resnet18(), (1, 3, 64, 64))  # doctest: +SKIP
        >>> m["resnetv10_stage1_conv0_weight"]
        'layer1.0.conv1.weight'
    """
    shapes, dtypes = normalize_shapes(input_shapes, input_dtypes)
    source = model_source(mx_model, shapes, dtypes)
    mx_graph = param_graph(source.onnx(shapes, dtypes, progress=progress), source.params)
    torch_keys = list(torch_model.state_dict()) if hasattr(torch_model, "state_dict") else None
    torch_graph = param_graph(export_torch(torch_model, shapes, dtypes, progress=progress), torch_keys)
    mapping = match_graphs(mx_graph, torch_graph, torch_keys)
    mapping.notes = list(source.notes)
    return mapping
