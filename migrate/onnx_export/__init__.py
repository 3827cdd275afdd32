"""Models to ONNX with their parameter names kept, made static: what matching reads of both models.

``torch_export`` (a torch module, ``export_torch``), ``mxnet_export`` (a model MXNet holds, ``export_mxnet``: MXNet's
exporter with ``mxnet_converters`` for what it lacks or gets wrong), ``structure_only`` (initializers without bytes)
and ``simplify`` (shape arithmetic folded, no-op and repeated nodes removed).
"""
from migrate.onnx_export.mxnet_export import export_mxnet
from migrate.onnx_export.simplify import simplify_graph
from migrate.onnx_export.structure_only import STRUCTURE_ONLY, shape_only_tensor
from migrate.onnx_export.torch_export import export_torch

__all__ = ["STRUCTURE_ONLY", "export_mxnet", "export_torch", "shape_only_tensor", "simplify_graph"]
