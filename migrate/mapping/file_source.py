"""MXNet's ``NAME-symbol.json`` + ``NAME-0000.params`` read into an ``MxSource`` without MXNet.

The symbol comes from ``mxformats.symbol.read_symbol`` (a ``SymbolGraph``, as MXNet 1.9.1 loads the file), the
parameters from ``mxformats.ndarray`` (numpy arrays, ``arg:``/``aux:`` dropped), a Module checkpoint's loss heads are
cut from the plain graph (``module_checkpoint``), and the auxiliary states are the variables at an op's auxiliary
inputs (``mxformats.symbol.INPUT_NAMES``). Such a source has ``reader == READ_WITHOUT_MXNET``; what runs MXNet
(``export_mxnet``, ``verify`` against MXNet) refuses it, what needs only the graph (``generate_torch``) takes it.

``model_source`` picks the path for a pair of files: MXNet's own (``export.load_mxnet``) where MXNet can be imported,
this one where it cannot or where the environment variable ``MIGRATE_WITHOUT_MXNET=1`` asks for it.

Examples:
    >>> source = read_mxnet_files("net-symbol.json", "net-0000.params")  # doctest: +SKIP
    >>> source.reader, source.input_names  # doctest: +SKIP
    ('MXNet graph read from symbol.json without MXNet', ['data'])
"""
from __future__ import annotations

import os

from mxformats.errors import MXNetRequiredError, SymbolFileError
from mxformats.ndarray import load_ndarrays
from mxformats.optional import import_mxnet
from mxformats.symbol import read_symbol

from migrate.errors import InputFileError
from migrate.mapping import module_checkpoint
from migrate.mapping.export import EXPORTED_WITH_MXNET, READ_WITHOUT_MXNET, MxSource, load_mxnet

__all__ = ["WITHOUT_MXNET_VARIABLE", "files_reader", "mxnet_reads_files", "model_source", "read_mxnet_files"]

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
    """The ``MxSource`` of ``mx_model``: files read without MXNet where ``mxnet_reads_files()`` is False, else
    ``export.load_mxnet`` (a Gluon block, files through MXNet, or an ``MxSource`` as it is).

    Args:
        mx_model: a Gluon ``HybridBlock``, a tuple ``(symbol_json_path, params_path)`` or an ``MxSource``.
        shapes: input shapes (a block's deferred initialization).
        dtypes: input dtypes.

    Raises:
        InputFileError: a file is missing, damaged or not what it claims (names it).
        MXNetRequiredError: ``mx_model`` is a Gluon block and MXNet is not installed.

    Examples:
        >>> model_source(("net-symbol.json", "net-0000.params"), [(1, 3, 8, 8)], [np.float32]).reader  # doctest: +SKIP
        'exported with MXNet'
    """
    if isinstance(mx_model, (tuple, list)) and len(mx_model) == 2 and not mxnet_reads_files():
        return read_mxnet_files(mx_model[0], mx_model[1])
    return load_mxnet(mx_model, shapes, dtypes)


def read_mxnet_files(symbol_path, params_path) -> MxSource:
    """Read a symbol JSON and its params file without MXNet.

    Args:
        symbol_path: ``NAME-symbol.json`` (``HybridBlock.export``, ``Module.save_checkpoint``, any MXNet 1.x).
        params_path: ``NAME-0000.params`` (names with or without ``arg:``/``aux:``).

    Returns:
        An ``MxSource`` whose ``symbol`` is a ``SymbolGraph`` (loss heads cut), ``params`` numpy arrays and
        ``reader`` ``READ_WITHOUT_MXNET``.

    Raises:
        InputFileError: a file is missing, not an MXNet symbol / params file (names the field or byte offset), the
            params are an unnamed list, or they lack an array the graph uses.

    Examples:
        >>> read_mxnet_files("bnnet-symbol.json", "bnnet-0000.params").notes  # doctest: +SKIP
        ["Module checkpoint: loss head SoftmaxOutput 'softmax' and label input ['softmax_label'] cut ..."]
    """
    sym_path, params_path = os.fspath(symbol_path), os.fspath(params_path)
    module_checkpoint.check_files_exist(sym_path, params_path)
    try:
        graph = read_symbol(sym_path)
    except SymbolFileError as exc:
        raise InputFileError(str(exc)) from None
    params = module_checkpoint.named_params(load_ndarrays(params_path, error=InputFileError), params_path)
    graph, notes = module_checkpoint.cut_loss_heads(graph, params)
    module_checkpoint.check_params_present(graph, params, params_path)
    variables = dict.fromkeys(graph.nodes[i].name for i in graph.arg_nodes)
    inputs = [name for name in variables if name not in params]
    return MxSource(graph, params, inputs, notes, reader=READ_WITHOUT_MXNET)
