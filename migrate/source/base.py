"""``MxSource``: the one interface of an MXNet model, whichever way it was read.

A source holds the model's parameter values and data inputs, and answers for its graph: the symbol JSON document,
the auxiliary states, the shapes of its nodes (what generation reads), its ONNX export (what matching reads), the
outputs of its nodes (what verification compares a torch model with) and the model as MXNet runs it (``live``: what
the training check runs). Each way of reading a model is one subclass in one module:
``LiveSource`` (MXNet holds the model: ``BlockSource`` from a Gluon block, ``CheckpointSource`` from symbol/params
files through MXNet) and ``FileSource`` (the files read by ``mxformats``, no MXNet: the graph's torch translation
stands in for MXNet). Mapping, generation, verification, the training check and the CLI ask the source; none of them
asks which kind it is.

Examples:
    >>> source = model_source(("net-symbol.json", "net-0000.params"), [(1, 3, 8, 8)], ["float32"])  # doctest: +SKIP
    >>> source.reader, source.input_names, sorted(source.params)[:2]  # doctest: +SKIP
    ('exported with MXNet', ['data'], ['conv0_bias', 'conv0_weight'])
"""
from __future__ import annotations

import abc
import functools

__all__ = ["EXPORTED_WITH_MXNET", "READ_WITHOUT_MXNET", "MXNET", "TRANSLATION", "MxSource", "parameter_users"]

EXPORTED_WITH_MXNET = "exported with MXNet"
"""``MxSource.reader`` of a model MXNet itself read (a Gluon block, or files through ``mx.sym.load``)."""
READ_WITHOUT_MXNET = "MXNet graph read from symbol.json without MXNet"
"""``MxSource.reader`` of files read by ``read_mxnet_files`` (no MXNet involved)."""
MXNET = "MXNet"
"""``MxSource.compared_with`` of a source MXNet runs."""
TRANSLATION = "the graph's torch translation"
"""``MxSource.compared_with`` of a source read without MXNet: its graph translated to torch runs in MXNet's place."""


class MxSource(abc.ABC):
    """An MXNet model as a graph plus its parameter values, whatever form the user gave it in.

    Args:
        params: Parameter name -> array (arguments and auxiliary states, no ``arg:``/``aux:``): ``mx.nd.NDArray``
            where MXNet read the model, ``numpy.ndarray`` otherwise.
        input_names: The data inputs of the graph, in order.
        notes: What was changed on the way in (loss heads cut from a Module checkpoint), one line each.
        block: The Gluon block read (its attribute tree names a generated module's layers), or None.
        files: The ``(symbol, params)`` paths read, or None.

    Attributes:
        reader: Which path read the model (``EXPORTED_WITH_MXNET`` or ``READ_WITHOUT_MXNET``; reports say it).
        compared_with: What stands for MXNet when a torch model is compared with this one (``MXNET`` or
            ``TRANSLATION``; reports say it).
    """

    reader: str
    compared_with: str

    def __init__(self, params: dict, input_names: list, notes=(), *, block=None, files=None):
        self.params, self.input_names, self.notes = params, list(input_names), list(notes)
        self.block, self.files = block, files

    @functools.cached_property
    def document(self) -> dict:
        """The symbol JSON document of the graph (as ``Symbol.tojson()`` writes it), read once."""
        return self._document()

    @abc.abstractmethod
    def _document(self) -> dict:
        """The symbol JSON document of the graph."""

    @property
    @abc.abstractmethod
    def aux_names(self) -> list:
        """The auxiliary states (BatchNorm's running statistics, ...), as ``Symbol.list_auxiliary_states()`` lists
        them."""

    @abc.abstractmethod
    def node_shapes(self, inputs: list, shapes, dtypes) -> list:
        """Each node's output shapes on data ``inputs`` (names) of ``shapes`` and ``dtypes``: a list per node of
        ``document["nodes"]``, in node order (None for an output left unknown).

        Raises:
            InputShapeError: the shapes do not fit the graph.
            UnsupportedOpError: a node cannot be evaluated (names the op).
        """

    @abc.abstractmethod
    def onnx(self, shapes, dtypes, *, with_weights=False, progress=None):
        """The graph as an ONNX ``ModelProto`` whose initializers carry the MXNet parameter names (structure-only
        unless ``with_weights``): what matching reads.

        Args:
            shapes: One shape per data input.
            dtypes: One numpy dtype per data input.
            with_weights: Export the parameter values too.
            progress: Optional callable ``progress(1)``, called per node or module exported.

        Raises:
            InputShapeError: the shapes do not fit the graph.
            ExportError, UnsupportedOpError: a node cannot be exported (names the op).
        """

    @abc.abstractmethod
    def node_outputs(self, shapes, dtypes, mapping):
        """The outputs of the nodes a torch model is compared with, node by node, in eval mode: an object with
        ``run(inputs, pairs, with_final=True) -> (outputs, finals)`` (``pairs``: ``(MXNet op, torch module, ...)``
        tuples; numpy arrays, None where a node's output cannot be had), ``output_sizes(ops)`` (op -> elements, where
        known before running), ``skip_note(op)`` (why a node is not compared on its own, or None) and ``missing``
        (the note of a node whose output is None).

        Args:
            shapes: One shape per data input.
            dtypes: One numpy dtype per data input.
            mapping: The ``NameMapping`` the comparison follows.
        """

    @abc.abstractmethod
    def live(self, what: str) -> "MxSource":
        """The model as MXNet runs it (an ``mx.sym.Symbol`` in ``symbol`` and ``mx.nd.NDArray`` parameters), for
        ``what`` needs MXNet itself (training the MXNet model).

        Raises:
            MXNetRequiredError: the model was read without MXNet (names ``what``).
        """

    def parameter_users(self) -> dict:
        """Parameter name -> ``(node, input position)`` of the first op node reading it, in node order (``node`` as
        the symbol JSON document holds it).

        Examples:
            >>> source.parameter_users()["fc_weight"][0]["name"]  # doctest: +SKIP
            'fc'
        """
        return parameter_users(self.document, self.params)


def parameter_users(document: dict, params) -> dict:
    """Parameter name (of ``params``) -> ``(node, input position)`` of the first op node of the symbol JSON
    ``document`` reading it, in node order."""
    nodes, users = document["nodes"], {}
    for node in nodes:
        for position, entry in enumerate(node["inputs"] if node["op"] != "null" else []):
            name = nodes[entry[0]]["name"]
            if nodes[entry[0]]["op"] == "null" and name in params:
                users.setdefault(name, (node, position))
    return users
