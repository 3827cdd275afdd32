"""``RecordedBlockSource``: a plain Gluon ``Block`` (not a ``HybridBlock``), its graph recorded while it runs once.

A plain Block has no symbol graph to trace: its ``forward`` is Python run on NDArrays (Sockeye 2's ``SockeyeModel``,
GluonNLP's ``BigRNN``). MXNet records the operations it runs under ``mx.autograd.record`` and gives them as a symbol
(``mx.autograd.get_symbol``); ``recording.record`` names that graph after the parameters, the inputs (``forward``'s
argument names) and the blocks that ran each op. From then on the source is a ``LiveSource`` like a HybridBlock's:
mapping, generation, verification and the training check read it unchanged.

The graph is the path one input took. ``read`` records on ones of the given shapes and dtypes (a token id 1, a length
1); ``record_block`` records on the inputs you give. Where the forward read a recorded value into Python (``if
length.asscalar() > 3``, ``range(int(n))``) or ran ops with recording paused, the graph holds the path and the
values of that input, and ``notes`` says where (file and line): generation writes these notes into the module's
docstring, ``name_mapping`` into ``NameMapping.notes``.

Examples:
    >>> source = record_block(model, [source_ids, source_length, target_ids, target_length])  # doctest: +SKIP
    >>> source.input_names  # doctest: +SKIP
    ['source', 'source_length', 'target', 'target_length']
    >>> generate_torch(source, [s.shape for s in inputs], "model.py", input_dtypes=[...])  # doctest: +SKIP
"""
from __future__ import annotations

import inspect

import numpy as np

from migrate.errors import InputShapeError, ModelTypeError
from migrate.source.live import LiveSource
from migrate.source.recording import record

__all__ = ["RecordedBlockSource", "record_block"]


class RecordedBlockSource(LiveSource):
    """A plain Gluon ``Block`` as the graph MXNet recorded while it ran (see ``LiveSource``); ``block`` is the block.

    Attributes:
        constants: The names of arrays the forward made from no recorded value (``recording.Recording.constants``).
        used_inputs: The inputs the recorded graph reads (an input the outputs do not depend on has no variable:
            the module still takes it, as the block's forward does).
    """

    constants: tuple = ()

    @staticmethod
    def accepts(mx_model) -> bool:
        """True for a ``mxnet.gluon.Block`` that is not a ``HybridBlock``."""
        import mxnet as mx
        return isinstance(mx_model, mx.gluon.Block) and not isinstance(mx_model, mx.gluon.HybridBlock)

    @classmethod
    def read(cls, block, shapes, dtypes) -> "RecordedBlockSource":
        """``block`` recorded on ones of ``shapes`` and ``dtypes`` (see ``record_block`` to choose the inputs).

        Raises:
            As ``record_block``.
        """
        import mxnet as mx
        inputs = [mx.nd.ones(tuple(s), dtype=np.dtype(d)) for s, d in zip(shapes, dtypes)]
        return record_block(block, inputs, recorded_on="ones of the given shapes")

    @property
    def used_inputs(self) -> list:
        arguments = set(self.symbol.list_inputs())
        return [name for name in self.input_names if name in arguments]

    @property
    def aux_names(self) -> list:
        """The graph's auxiliary states, then its constants (kept as buffers, never trained)."""
        return self.symbol.list_auxiliary_states() + list(self.constants)

    def onnx(self, shapes, dtypes, *, with_weights=False, progress=None):
        """MXNet's ONNX export of the recorded graph (its inputs: those it reads)."""
        keep = [i for i, name in enumerate(self.input_names) if name in set(self.used_inputs)]
        view = LiveSource(self.symbol, self.params, self.used_inputs, self.notes, block=self.block)
        return view.onnx([shapes[i] for i in keep], [dtypes[i] for i in keep], with_weights=with_weights,
                         progress=progress)


def record_block(block, inputs: list, *, recorded_on: str = "the inputs given") -> RecordedBlockSource:
    """The source of a plain Gluon ``Block``: the graph MXNet records while ``block(*inputs)`` runs.

    Args:
        block: an initialized ``mxnet.gluon.Block`` (deferred initialization is finished by one run on ``inputs``).
        inputs: one ``mx.nd.NDArray`` or numpy array per positional argument of ``block.forward``; the graph is
            the path these inputs take.
        recorded_on: what the inputs were, for the notes.

    Returns:
        A ``RecordedBlockSource``: pass it as the MXNet model to ``generate_torch``, ``name_mapping`` or ``verify``.

    Raises:
        ModelTypeError: ``block`` is not a Gluon Block, its parameters are not initialized, it returns None or a
            non-array, or a child runs as one opaque ``_CachedOp`` (a ``SymbolBlock``).
        InputShapeError: the block rejects the inputs (its message).

    Examples:
        >>> source = record_block(model, [mx.nd.ones((2, 7)), mx.nd.array([7, 5])])  # doctest: +SKIP
        >>> source.notes[0]  # doctest: +SKIP
        'recorded: Gluon Block Model ran once on the inputs given (shapes [(2, 7), (2,)]) ...'

    Note:
        The graph holds one path: where ``forward`` branches or loops on a value of the data (a Python ``if`` on an
        NDArray, a loop over a length read from it), the module holds the path of ``inputs``, and ``notes`` names
        each place it read such a value. Recording runs in eval mode (``train_mode=False``: BatchNorm's running
        statistics are not updated, Dropout's op is still recorded and drops in training mode); code that branches
        on ``mx.autograd.is_training()`` holds its eval branch; ops run inside ``autograd.train_mode()`` compute as
        in training in either mode of the module. Frozen parameters become marked autograd variables (with
        ``grad_req='null'``).
    """
    import mxnet as mx
    if not isinstance(block, mx.gluon.Block):
        raise ModelTypeError(f"record_block: expected an mxnet.gluon.Block; received {type(block).__name__}")
    arrays = [x if isinstance(x, mx.nd.NDArray) else mx.nd.array(np.asarray(x), dtype=np.asarray(x).dtype)
              for x in inputs]
    names = _input_names(block, len(arrays))
    recording = record(block, arrays, names)
    source = RecordedBlockSource(recording.symbol, recording.params, names, block=block)
    source.constants = recording.constants
    source.notes = _notes(block, recording, recorded_on, [tuple(x.shape) for x in arrays], source.used_inputs, names)
    return source


def _input_names(block, count: int) -> list:
    """The names of the block's positional inputs: ``forward``'s arguments (a HybridBlock's ``hybrid_forward``'s, ``F``
    and its parameters left out); ``data0``, ``data1`` ... past them where it takes ``*args``.

    Raises:
        InputShapeError: the block does not take ``count`` positional inputs.
    """
    import mxnet as mx
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if isinstance(block, mx.gluon.HybridBlock):
        params = list(inspect.signature(block.hybrid_forward).parameters.values())[1:]
        params = [p for p in params if p.name not in block._reg_params]
    else:
        params = list(inspect.signature(block.forward).parameters.values())
    named = [p.name for p in params if p.kind in kinds]
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params) and len(named) < count:
        return named + [f"data{i}" for i in range(len(named), count)]
    required = [p for p in params if p.kind in kinds and p.default is inspect.Parameter.empty]
    if not len(required) <= count <= len(named):
        raise InputShapeError(f"MXNet block {type(block).__name__}: forward takes {len(required)} to {len(named)} "
                              f"positional input(s) {named}; received {count}; give one input per argument")
    return named[:count]


def _notes(block, recording, recorded_on: str, shapes: list, used: list, names: list) -> list:
    """What the recorded graph holds and where it may differ from the Block's forward, one line each."""
    name = type(block).__name__
    notes = [f"recorded: Gluon Block {name} ran once on {recorded_on} (shapes {shapes}) under mx.autograd.record; "
             f"the module holds the operations of that run"]
    if recording.reads:
        places = ", ".join(dict.fromkeys(recording.reads))
        notes.append(f"data-dependent: forward read recorded values into Python at {places}; where control flow "
                     f"depends on them the module holds the path of the recorded input (record the input you "
                     f"want with migrate.source.record_block)")
    if recording.paused:
        places = ", ".join(dict.fromkeys(recording.paused))
        notes.append(f"paused: ops ran on recorded values with autograd recording off at {places}; their "
                     f"results are constants of the module")
    if recording.trained:
        notes.append(f"training mode: forward forced training mode (autograd.train_mode) for {', '.join(recording.trained)}; "
                     f"the module runs these ops in training mode in either of its modes, as the Block did (a "
                     f"BatchNorm normalizes with the batch's statistics)")
    if recording.constants:
        shown = ", ".join(recording.constants[:6]) + (", ..." if len(recording.constants) > 6 else "")
        notes.append(f"constants: {len(recording.constants)} array(s) forward made from no recorded value "
                     f"(mx.nd.zeros, eye, arange ...) are buffers of the module ({shown})")
    unused = [n for n in names if n not in used]
    if unused:
        notes.append(f"inputs {unused} are not read by the recorded outputs (the module takes and ignores them)")
    return notes
