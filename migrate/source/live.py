"""``LiveSource``: a model MXNet holds, an ``mx.sym.Symbol`` and its ``mx.nd.NDArray`` parameters.

MXNet answers for it: its shape inference gives the nodes' shapes, its ONNX exporter (``migrate.onnx_export``) gives
the graph matching reads, and the symbol itself runs where a torch model is compared with it. The ways of reading one
are its subclasses: ``BlockSource`` (a Gluon block) and ``CheckpointSource`` (symbol/params files through MXNet).

Examples:
    >>> source = load_mxnet(net, [(1, 4)], [np.float32])  # doctest: +SKIP
    >>> source.node_output_shapes([(1, 4)])["dense0_fwd"]  # doctest: +SKIP
    (1, 10)
"""
from __future__ import annotations

import json

from migrate.onnx_export.mxnet_export import export_mxnet
from migrate.source.base import EXPORTED_WITH_MXNET, MXNET, MxSource

__all__ = ["LiveSource"]


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
        known = {k: v.shape for k, v in self.params.items()}
        infer = internals.infer_shape_partial if partial else internals.infer_shape
        _, out_shapes, _ = infer(**known, **dict(zip(self.input_names, shapes)))
        return {output[:-len("_output")]: tuple(int(d) for d in shape)
                for output, shape in zip(internals.list_outputs(), out_shapes or [])
                if output.endswith("_output") and shape is not None}

    def onnx(self, shapes, dtypes, *, with_weights=False, progress=None):
        """MXNet's ONNX export of the symbol (``migrate.onnx_export.export_mxnet``)."""
        return export_mxnet(self, shapes, dtypes, with_weights=with_weights, progress=progress)

    def live(self, what: str) -> "LiveSource":
        """This source: MXNet holds it already."""
        return self
