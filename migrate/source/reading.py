"""Which kind reads a model: ``load_mxnet`` (through MXNet: ``LIVE_KINDS``), ``model_source`` (files without MXNet
where MXNet is absent or ``MIGRATE_WITHOUT_MXNET=1`` asks for it, else as ``load_mxnet``).

A kind is a ``MxSource`` subclass with ``accepts(mx_model)`` and ``read(mx_model, shapes, dtypes)``; the first kind
of ``LIVE_KINDS`` that accepts a model reads it.

Examples:
    >>> model_source(("net-symbol.json", "net-0000.params"), [(1, 3, 8, 8)], [np.float32]).reader  # doctest: +SKIP
    'exported with MXNet'
"""
from __future__ import annotations

import os

from mxformats.errors import MXNetRequiredError
from mxformats.optional import import_mxnet

from migrate.errors import ModelTypeError
from migrate.source.base import EXPORTED_WITH_MXNET, READ_WITHOUT_MXNET, MxSource
from migrate.source.checkpoint import CheckpointSource
from migrate.source.files import FileSource
from migrate.source.gluon_block import BlockSource
from migrate.source.recorded_block import RecordedBlockSource

__all__ = ["LIVE_KINDS", "WITHOUT_MXNET_VARIABLE", "files_reader", "load_mxnet", "model_source",
           "mxnet_reads_files"]

LIVE_KINDS = (BlockSource, RecordedBlockSource, CheckpointSource)
"""The kinds MXNet reads, in the order they are asked whether they accept a model."""
WITHOUT_MXNET_VARIABLE = "MIGRATE_WITHOUT_MXNET"
"""Set to ``1`` to read symbol/params files without MXNet even where MXNet is installed."""


def mxnet_reads_files() -> bool:
    """True when MXNet reads symbol/params files here: it imports, and ``MIGRATE_WITHOUT_MXNET`` is not ``1``.

    Examples:
        >>> os.environ["MIGRATE_WITHOUT_MXNET"] = "1"; mxnet_reads_files()  # doctest: +SKIP
        False
    """
    if os.environ.get(WITHOUT_MXNET_VARIABLE) == "1":
        return False
    try:
        import_mxnet("reading MXNet's files")
    except MXNetRequiredError:
        return False
    return True


def files_reader() -> str:
    """Which path ``model_source`` reads symbol/params files by here: ``READ_WITHOUT_MXNET`` or
    ``EXPORTED_WITH_MXNET`` (the ``MxSource.reader`` it gives them; reports say it).

    Examples:
        >>> files_reader()  # doctest: +SKIP
        'MXNet graph read from symbol.json without MXNet'
    """
    return EXPORTED_WITH_MXNET if mxnet_reads_files() else READ_WITHOUT_MXNET


def model_source(mx_model, shapes, dtypes) -> MxSource:
    """The ``MxSource`` of ``mx_model``: files read without MXNet (``FileSource``) where ``mxnet_reads_files()`` is
    False, else ``load_mxnet`` (a Gluon block, files through MXNet, or an ``MxSource`` as it is).

    Args:
        mx_model: a Gluon ``HybridBlock`` or plain ``Block``, a tuple ``(symbol_json_path, params_path)`` or an
            ``MxSource``.
        shapes: input shapes (a block's deferred initialization).
        dtypes: input dtypes.

    Raises:
        InputFileError: a file is missing, damaged or not what it claims (names it).
        MXNetRequiredError: ``mx_model`` is a Gluon block and MXNet is not installed.

    Examples:
        >>> model_source(("net-symbol.json", "net-0000.params"), [(1, 3, 8, 8)], [np.float32]).reader  # doctest: +SKIP
        'exported with MXNet'
    """
    if FileSource.accepts(mx_model) and not mxnet_reads_files():
        return FileSource.read(mx_model, shapes, dtypes)
    return load_mxnet(mx_model, shapes, dtypes)


def load_mxnet(mx_model, shapes, dtypes) -> MxSource:
    """The model ``mx_model`` read through MXNet (the first of ``LIVE_KINDS`` that accepts it).

    Args:
        mx_model: an initialized ``mxnet.gluon.HybridBlock`` or plain ``Block`` (recorded while it runs on ones of
            ``shapes``: ``RecordedBlockSource``), a tuple ``(symbol_json_path, params_path)``, or an
            ``MxSource`` (returned as it is: load the files once and pass the source to each stage).
        shapes: input shapes (used to finish deferred initialization of a block).
        dtypes: input dtypes.

    Returns:
        A ``LiveSource`` (or ``mx_model`` itself).

    Raises:
        InputFileError: a file is missing or is not an MXNet symbol / params file.
        ModelTypeError: ``mx_model`` is none of these forms.
        MXNetRequiredError: MXNet is not installed here.

    Examples:
        >>> src = load_mxnet(("net-symbol.json", "net-0000.params"), [(1, 3, 32, 32)], [np.float32])  # doctest: +SKIP
    """
    if isinstance(mx_model, MxSource):
        return mx_model
    import_mxnet("migrate's MXNet side (reading the MXNet model to map, verify or generate it)")
    for kind in LIVE_KINDS:
        if kind.accepts(mx_model):
            return kind.read(mx_model, shapes, dtypes)
    raise ModelTypeError(f"mx_model: expected an initialized mxnet.gluon.Block (a HybridBlock, or a plain Block "
                         f"recorded while it runs) or a tuple (symbol_json_path, params_path); received "
                         f"{type(mx_model).__name__}")
