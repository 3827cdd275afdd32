"""Initializers that carry a parameter's name, shape and dtype but no bytes: what matching reads of a weight.

Examples:
    >>> shape_only_tensor("fc.weight", 1, (4096, 4096)).external_data[0].value == STRUCTURE_ONLY
    True
"""
from __future__ import annotations

__all__ = ["STRUCTURE_ONLY", "shape_only_tensor"]

STRUCTURE_ONLY = "structure-only: weights not exported"
"""The external-data location of an initializer exported without its bytes (``with_weights=False``)."""


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
