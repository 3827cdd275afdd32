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
            ModelTypeError: the parameters are not initialized, or the block returns None.
            InputShapeError: the block does not take that many inputs, or rejects the shapes.
        """
        import mxnet as mx
        names = ["data"] if len(shapes) == 1 else [f"data{i}" for i in range(len(shapes))]
        params = block.collect_params()
        try:
            values = {p.name: p.data() for p in params.values()}
        except mx.gluon.parameter.DeferredInitializationError:
            _forward(block, shapes, dtypes)
            values = {p.name: p.data() for p in params.values()}
        except RuntimeError as exc:
            raise ModelTypeError(f"MXNet block {type(block).__name__}: parameters are not initialized "
                                 f"({first_line(exc)}); call block.initialize() first") from None
        try:
            symbol = block(*[mx.sym.var(n) for n in names])
        except TypeError as exc:
            raise InputShapeError(f"MXNet block {type(block).__name__} does not take {len(names)} input(s) "
                                  f"({first_line(exc)}); give one shape per input of its hybrid_forward") from None
        if symbol is None or isinstance(symbol, (list, tuple)):
            symbol = mx.sym.Group(_output_symbols(block, symbol))
        return cls(symbol, values, names, block=block)


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


def _forward(block, shapes, dtypes) -> None:
    import mxnet as mx
    try:
        block(*[mx.nd.zeros(s, dtype=d) for s, d in zip(shapes, dtypes)])
    except Exception as exc:
        raise InputShapeError(f"MXNet block {type(block).__name__} rejected input shapes {shapes}: "
                              f"{first_line(exc)}; give the shapes the model accepts") from None
