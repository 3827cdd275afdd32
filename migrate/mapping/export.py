"""Where verification and generation import the source and export names from until they ask ``migrate.source``
(the MXNet model), ``migrate.onnx_export`` (ONNX) and ``migrate.arguments`` (shapes) themselves."""
from migrate.arguments import normalize_shapes
from migrate.source.base import MxSource


def node_output_shapes(source: MxSource, shapes, *, partial=False) -> dict:
    """``source.node_output_shapes(shapes, partial=partial)``."""
    return source.node_output_shapes(shapes, partial=partial)


__all__ = ["MxSource", "node_output_shapes", "normalize_shapes"]
