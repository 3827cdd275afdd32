"""``CheckpointSource``: symbol/params files read by MXNet (``mx.sym.load``, ``mx.nd.load``).

The files ``HybridBlock.export`` writes (``NAME-symbol.json``, ``NAME-0000.params``) and those of
``Module.save_checkpoint`` (``arg:``/``aux:`` prefixes dropped, loss heads and label inputs cut:
``module_checkpoint``).

Examples:
    >>> source = CheckpointSource.read(("mlp-symbol.json", "mlp-0000.params"))  # doctest: +SKIP
    >>> source.notes  # doctest: +SKIP
    ["Module checkpoint: loss head SoftmaxOutput 'softmax' and label input ['softmax_label'] cut ..."]
"""
from __future__ import annotations

import json

from mxformats.symbol import symbol_file_problem

from migrate.errors import InputFileError, first_line
from migrate.source import module_checkpoint
from migrate.source.live import LiveSource

__all__ = ["CheckpointSource", "cut_loss_heads"]


class CheckpointSource(LiveSource):
    """Symbol/params files as MXNet reads them (see ``LiveSource``)."""

    @staticmethod
    def accepts(mx_model) -> bool:
        """True for a pair ``(symbol_json_path, params_path)``."""
        return isinstance(mx_model, (tuple, list)) and len(mx_model) == 2

    @classmethod
    def read(cls, mx_model, shapes=None, dtypes=None) -> "CheckpointSource":
        """Read ``(symbol_json_path, params_path)`` through MXNet (``shapes`` and ``dtypes`` are not needed).

        Raises:
            InputFileError: a file is missing, is not an MXNet symbol / params file, or the params lack an array the
                symbol uses.
        """
        import mxnet as mx
        sym_path, params_path = str(mx_model[0]), str(mx_model[1])
        module_checkpoint.check_files_exist(sym_path, params_path)
        try:
            symbol = mx.sym.load(sym_path)
        except Exception as exc:  # mxnet raises MXNetError or json errors; mxformats names what is wrong where it can
            raise InputFileError(f"MXNet symbol file {sym_path!r}: expected a symbol JSON written by "
                                 f"HybridBlock.export or Symbol.save; could not parse it "
                                 f"({symbol_file_problem(sym_path) or first_line(exc)})") from None
        try:
            raw = mx.nd.load(params_path)
        except Exception as exc:
            raise InputFileError(f"MXNet params file {params_path!r}: expected an NDArray dict written by "
                                 f"HybridBlock.export or mx.nd.save; could not read it ({first_line(exc)})") from None
        params = module_checkpoint.named_params(raw, params_path)
        symbol, notes = cut_loss_heads(symbol, params)
        module_checkpoint.check_params_present(symbol.list_auxiliary_states(), symbol.list_arguments(), params,
                                               params_path)
        inputs = [n for n in symbol.list_inputs() if n not in params]
        return cls(symbol, params, inputs, notes, files=(sym_path, params_path))


def cut_loss_heads(symbol, params: dict) -> tuple:
    """``(symbol, notes)``: the ``mx.sym.Symbol`` without its loss heads and label inputs (``module_checkpoint``),
    and one line per cut; the symbol itself and ``[]`` when it has no loss head.

    Examples:
        >>> symbol, notes = cut_loss_heads(mx.sym.load("mlp-symbol.json"), params)  # doctest: +SKIP
        >>> notes
        ["Module checkpoint: loss head SoftmaxOutput 'softmax' cut ..."]
    """
    document = json.loads(symbol.tojson())
    cut = module_checkpoint.loss_cut(document, params)
    if cut is None:
        return symbol, []
    frontier, notes = cut
    return _symbol_with_outputs(symbol, document["nodes"], frontier), notes


def _symbol_with_outputs(symbol, nodes: list, frontier: list):
    """The MXNet symbol whose outputs are the entries ``frontier`` of ``nodes`` (``symbol``'s own)."""
    import mxnet as mx
    internals = symbol.get_internals()
    names = internals.list_outputs()
    outputs = [internals[_output_name(names, nodes[i], k)] for i, k in frontier]
    return mx.sym.Group(outputs) if len(outputs) > 1 else outputs[0]


def _output_name(internals: list, node: dict, index: int) -> str:
    """The name ``get_internals()`` gives output ``index`` of ``node``."""
    for name in (f"{node['name']}_output", f"{node['name']}_output{index}"):
        if name in internals:
            return name
    return internals[-1] if node["op"] == "null" else f"{node['name']}_output{index}"
