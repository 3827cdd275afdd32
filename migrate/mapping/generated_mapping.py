"""The ``NameMapping`` of a module ``generate_torch`` wrote, read from the module and the MXNet graph, no export.

A generated module holds each MXNet parameter under the key its ``MXNET_NAMES`` gives, in MXNet's own shape, so the
mapping needs no matching: every entry is that key with no layout step, and a BatchNorm scale under
``fix_gamma=True`` (the op's default) is held at 1, as matching marks it. This is how ``migrate`` maps
``--torch generate`` where MXNet (whose ONNX exporter matching reads) is not installed. The fields that convert
weights and optimizer states (``torch``, ``steps``, ``fold``, ``held``, both shapes) are those matching gives on the
same files (tests/migrate/test_without_mxnet_files.py); ``kind``, ``mx_node`` and ``torch_node`` name the MXNet op,
the MXNet graph node and the generated module path instead of ONNX nodes.

Examples:
    >>> model = generate_torch(files, (1, 3, 32, 32), "model.py")  # doctest: +SKIP
    >>> generated_mapping(read_mxnet_files(*files), model)["conv0_weight"]  # doctest: +SKIP
    'conv0.weight'
"""
from __future__ import annotations

from mxformats.symbol import INPUT_NAMES

from migrate.errors import MappingError
from migrate.mapping.table import NameMapping
from migrate.source.base import MxSource

__all__ = ["generated_mapping"]

_BATCH_NORMS = {"BatchNorm", "BatchNorm_v1", "_contrib_SyncBatchNorm", "CuDNNBatchNorm"}
_KINDS = {"Convolution": "conv", "Convolution_v1": "conv", "Deconvolution": "convtranspose",
          "FullyConnected": "linear", "Embedding": "embed", **{op: "bn" for op in _BATCH_NORMS}}


def generated_mapping(source: MxSource, model) -> NameMapping:
    """The mapping of the MXNet parameters of ``source`` onto ``model``, a module ``generate_torch`` wrote for it.

    Args:
        source: the MXNet model (read with or without MXNet).
        model: the generated module (its class has ``MXNET_NAMES``).

    Returns:
        A ``NameMapping``: each parameter and auxiliary state the graph uses, to its key; ``held`` 1.0 for the scale
        of a BatchNorm with ``fix_gamma`` true.

    Raises:
        MappingError: ``model`` is not a generated module, or lacks a key the graph needs (names them).

    Examples:
        >>> generated_mapping(source, model).held  # doctest: +SKIP
        {'bn1_gamma': 1.0}
    """
    names = getattr(model, "MXNET_NAMES", None)
    if not isinstance(names, dict):
        raise MappingError(f"torch model {type(model).__name__}: expected a module generate_torch wrote (its class "
                           f"has MXNET_NAMES); give --mapping, or match the model where MXNet is installed")
    state = model.state_dict()
    users = source.parameter_users()
    missing = sorted(name for name in users if names.get(name) not in state)
    if missing:
        raise MappingError(f"generated module {type(model).__name__} has no state_dict key for the MXNet parameters "
                           f"{missing[:8]}; generate it again from these files")
    entries = {name: _entry(node, position, source.params[name], names[name], state[names[name]])
               for name, (node, position) in users.items()}
    return NameMapping(entries)


def _entry(node: dict, position: int, value, key: str, tensor) -> dict:
    """One mapping record: the key, no layout step, ``held`` for a scale MXNet fixes at 1."""
    attrs = node.get("attrs", {})
    inputs = INPUT_NAMES[node["op"]](attrs) if node["op"] in INPUT_NAMES else ()
    held = (node["op"] in _BATCH_NORMS and position < len(inputs) and inputs[position] == "gamma"
            and str(attrs.get("fix_gamma", "True")).strip().lower() in ("true", "1"))
    kind = "prelu" if node["op"] == "LeakyReLU" and attrs.get("act_type") == "prelu" else _KINDS.get(
        node["op"], node["op"].lower())
    entry = {"torch": key, "steps": [], "fold": False, "kind": kind, "mx_node": node["name"],
             "torch_node": key.rsplit(".", 1)[0] if "." in key else "", "mx_shape": tuple(value.shape),
             "torch_shape": tuple(tensor.shape)}
    return dict(entry, held=1.0) if held else entry
