"""``BlockSource``: an initialized Gluon ``HybridBlock``, its graph traced on symbol variables.

The data inputs are named ``data`` (one input) or ``data0``, ``data1``, ...; a block whose initialization was
deferred runs one forward on zeros of the given shapes first. The block itself is kept: its attribute tree names the
layers of a generated module.

Examples:
    >>> source = BlockSource.read(net, [(1, 3, 32, 32)], [np.float32])  # doctest: +SKIP
    >>> source.input_names  # doctest: +SKIP
    ['data']
"""
from __future__ import annotations

from migrate.errors import InputShapeError, ModelTypeError, first_line
from migrate.source.live import LiveSource
from migrate.source.recording import block_arrays, parameter_arrays

__all__ = ["BlockSource"]


class BlockSource(LiveSource):
    """A Gluon ``HybridBlock`` (see ``LiveSource``); ``block`` is the block."""

    @staticmethod
    def accepts(mx_model) -> bool:
        """True for a ``mxnet.gluon.HybridBlock``."""
        import mxnet as mx
        return isinstance(mx_model, mx.gluon.HybridBlock)

    @classmethod
    def read(cls, block, shapes, dtypes) -> "BlockSource":
        """The graph and parameters of ``block`` for inputs of ``shapes`` and ``dtypes``.

        Raises:
            ModelTypeError: the parameters are not initialized, the block returns None, or its forward fails on
                symbols (a Python ``if`` on a value: ``record_block`` reads such a block).
            InputShapeError: the block does not take that many inputs, or rejects the shapes.
        """
        import mxnet as mx
        names = ["data"] if len(shapes) == 1 else [f"data{i}" for i in range(len(shapes))]
        values = parameter_arrays(block, [mx.nd.zeros(s, dtype=d) for s, d in zip(shapes, dtypes)])
        try:
            symbol = block(*[mx.sym.var(n) for n in names])
        except TypeError as exc:
            raise InputShapeError(f"MXNet block {type(block).__name__} does not take {len(names)} input(s) "
                                  f"({first_line(exc)}); give one shape per input of its hybrid_forward") from None
        except Exception as exc:  # MXNet's NotImplementedForSymbol, or the block's own error on symbols
            raise ModelTypeError(f"MXNet block {type(block).__name__} cannot be traced as a symbol graph "
                                 f"({first_line(exc)}); record it while it runs instead: pass "
                                 f"migrate.source.record_block(block, inputs) as the MXNet model") from None
        if symbol is None or isinstance(symbol, (list, tuple)):
            symbol = mx.sym.Group(block_arrays(block, symbol))
        return cls(symbol, values, names, block=block)

