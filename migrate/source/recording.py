"""What MXNet records while a plain Gluon ``Block`` runs once: the graph of its operations, named, and what the run
did that a graph cannot hold.

``record(block, inputs, input_names)`` runs ``block(*inputs)`` under ``mx.autograd.record(train_mode=False)`` and reads
the graph with ``mx.autograd.get_symbol``. MXNet names what it records by counters (``var3``, ``null8``, ``node_41``);
the recording gives the nodes their names back:

- a parameter's variable is found by ``get_symbol(param.data())``. Every parameter array is a marked variable before
  the run (Gluon marks the trained ones; a frozen one, ``grad_req='null'``, is marked here with ``grad_req='null'``),
  so what the forward computes from a parameter is recorded, not read as a constant;
- an input's variable takes the input's name (the inputs run as marked copies);
- an op takes the name of the block that ran it, as a HybridBlock's trace names it: ``<prefix>fwd`` for a call's only
  op, else ``<prefix><op><n>`` (a probe op's counter marks where each block call begins and ends);
- an array the forward made from no recorded value (``mx.nd.arange``, a stored ``mx.nd.array``) is a variable named
  ``constant<n>``, its value kept.

Ops run inside ``mx.autograd.pause()`` (GluonTS draws its samples so) are recorded too, and a ``BlockGrad`` node stands
where an op outside the pause reads their result: the values follow the input, and no gradient flows through them, as
in MXNet. What the graph does not hold is kept in the ``Recording``:

- ``reads``: a recorded value read into Python (``asnumpy``, ``asscalar``, ``bool(x)``, ``int(x)``, ``x.item()``):
  control flow that depends on the data took the path of the recorded input, and the graph holds that path only;
- ``paused``: an op run on recorded values with recording off some other way (``autograd.set_recording(False)``, a
  ``pause`` imported before the recording): its result is a constant.

An op the forward ran in a training mode it forced (``autograd.train_mode()``: GluonCV's GroupNorm normalizes by a
BatchNorm so) computes so in the graph too: a Dropout gets ``mode="always"``, a BatchNorm or RNN the hidden attribute
``mxformats.symbol.FORCED_TRAINING``, which the translation and verification's MXNet run read.

Hybridized children run op by op while recording (a ``_CachedOp`` node would hide their ops) and are hybridized again
afterwards; a ``SymbolBlock`` always runs as one ``_CachedOp``, which is refused.

Examples:
    >>> recording = record(net, [mx.nd.ones((2, 5))], ["tokens"])  # doctest: +SKIP
    >>> recording.symbol.list_arguments()[:2]  # doctest: +SKIP
    ['tokens', 'net0_embedding0_weight']
"""
from __future__ import annotations

import bisect
import collections
import contextlib
import json
import os
import sys
from dataclasses import dataclass, field

from migrate.errors import InputShapeError, ModelTypeError, first_line
from mxformats.symbol import FORCED_TRAINING, MODE_OPS

__all__ = ["Recording", "block_arrays", "parameter_arrays", "record"]

_HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Recording:
    """A recorded run of a Block.

    Attributes:
        symbol: The graph (``mx.sym.Symbol``): variables named after the parameters, inputs and constants.
        params: Parameter (and constant) name -> ``mx.nd.NDArray`` the graph reads.
        constants: The names of the constants among ``params`` (arrays the forward made from no recorded value).
        reads: ``file:line (function)`` of each place the forward read a recorded value into Python.
        paused: ``file:line (function)`` of each op run on recorded values with recording off (not through
            ``mx.autograd.pause``, which is recorded through).
        trained: ``<op> at file:line (function)`` of each op whose result depends on the training mode (BatchNorm,
            Dropout, ...) that the forward ran in a training mode it forced (``autograd.train_mode()``; the recording
            runs in eval mode): marked in the graph to compute as in training in either mode.
    """

    symbol: object
    params: dict
    constants: list = field(default_factory=list)
    reads: list = field(default_factory=list)
    paused: list = field(default_factory=list)
    trained: list = field(default_factory=list)


def record(block, inputs: list, input_names: list) -> Recording:
    """The graph MXNet records while ``block`` runs on ``inputs`` (``mx.nd.NDArray``), named (see the module).

    Raises:
        ModelTypeError: the parameters are not initialized, an output is None or not an array, or a child runs as
            a ``_CachedOp`` (a ``SymbolBlock``).
        InputShapeError: the block rejects the inputs (its message).
    """
    import mxnet as mx
    params = parameter_arrays(block, inputs)
    _mark_frozen(block)
    marked = [_marked_copy(x) for x in inputs]
    with _Watch(block) as watch:
        try:
            with mx.autograd.record(train_mode=False):
                outputs = block(*marked)
        except Exception as exc:
            raise InputShapeError(f"MXNet block {type(block).__name__} rejected inputs of shapes "
                                  f"{[tuple(x.shape) for x in inputs]}: {first_line(exc)}; give the shapes and "
                                  f"inputs the model accepts") from None
    symbols = [_head_symbol(block, head) for head in block_arrays(block, outputs)]
    document = json.loads((symbols[0] if len(symbols) == 1 else mx.sym.Group(symbols)).tojson())
    _check_cached_ops(block, document)
    _copies_as_casts(document, watch.written)
    names = _variable_names(params, dict(zip(input_names, marked)))
    constants = _constants(document, names, watch.arguments)
    paused = watch.paused_nodes(document)
    trained = [f"{n['op']} at {watch.training[n['name']]}" for n in document["nodes"]
               if n["op"] in MODE_OPS and n["name"] in watch.training]
    _mark_forced_training(document, watch.training)
    _name_nodes(document, {**names, **{v: k for k, (v, _) in constants.items()}}, watch.owners)
    document = _with_gradient_stops(document, paused)
    used = {n["name"] for n in document["nodes"] if n["op"] == "null"}
    values = {k: v for k, v in params.items() if k in used}
    values.update({name: value for name, (_, value) in constants.items()})
    return Recording(mx.sym.load_json(json.dumps(document)), values, list(constants), watch.reads, watch.paused,
                     list(dict.fromkeys(trained)))


def _mark_forced_training(document: dict, forced: dict) -> None:
    """The ops of ``document`` run in a training mode the forward forced (``forced``: node name -> where) compute so
    in the graph too: a Dropout gets MXNet's ``mode="always"``, a BatchNorm or RNN the hidden attribute
    ``FORCED_TRAINING`` (its translation and verification's MXNet run read it)."""
    for node in document["nodes"]:
        if node["op"] in MODE_OPS and node["name"] in forced:
            attrs = node.setdefault("attrs", {})
            if node["op"] == "Dropout":
                attrs["mode"] = "always"
            else:
                attrs[FORCED_TRAINING] = "True"


def block_arrays(block, outputs, where: tuple = ()) -> list:
    """The arrays (or symbols) a block returned, in order: tuples and lists flattened, a dict's values in its order
    (as ``HybridBlock.export`` writes nested outputs).

    Raises:
        ModelTypeError: an output is None (names its position): a graph holds only arrays.

    Examples:
        >>> len(block_arrays(net, {"logits": y, "aux": (a, b)}))  # doctest: +SKIP
        3
    """
    if isinstance(outputs, dict):
        return [a for key, out in outputs.items() for a in block_arrays(block, out, where + (repr(key),))]
    if isinstance(outputs, (list, tuple)):
        return [a for i, out in enumerate(outputs) for a in block_arrays(block, out, where + (i,))]
    if outputs is None:
        raise ModelTypeError(f"MXNet block {type(block).__name__} returns None as its output"
                             f"{''.join(f'[{i}]' for i in where)}; an MXNet graph holds arrays only: wrap the block "
                             f"in one whose forward returns its arrays without the None")
    return [outputs]


def parameter_arrays(block, inputs: list) -> dict:
    """Parameter name -> its ``mx.nd.NDArray`` of the Gluon ``block``; a deferred initialization is finished by one
    run on ``inputs`` (NDArrays) first.

    Raises:
        ModelTypeError: the parameters are not initialized.
        InputShapeError: the block rejects the inputs (its message).
    """
    import mxnet as mx
    params = block.collect_params()
    try:
        return {p.name: p.data() for p in params.values()}
    except mx.gluon.parameter.DeferredInitializationError:
        try:
            block(*inputs)
        except Exception as exc:
            raise InputShapeError(f"MXNet block {type(block).__name__} rejected inputs of shapes "
                                  f"{[tuple(x.shape) for x in inputs]}: {first_line(exc)}; give the shapes and "
                                  f"inputs the model accepts") from None
        return {p.name: p.data() for p in params.values()}
    except RuntimeError as exc:
        raise ModelTypeError(f"MXNet block {type(block).__name__}: parameters are not initialized "
                             f"({first_line(exc)}); call block.initialize() first") from None


def _mark_frozen(block) -> None:
    """Marks each parameter array with ``grad_req='null'`` as an autograd variable (Gluon marks the others), so that
    what the forward computes from it is recorded."""
    import mxnet as mx
    for param in block.collect_params().values():
        if param.grad_req == "null" and not _recorded(param.data()):
            mx.autograd.mark_variables([param.data()], [mx.nd.zeros_like(param.data())], grad_reqs="null")


def _marked_copy(array):
    copy = array.copy()
    copy.attach_grad()
    return copy


def _recorded(array) -> bool:
    """True when ``array`` is a node of the autograd graph (a marked variable or a recorded op's output)."""
    return _node_name(array) is not None


def _node_name(array) -> str | None:
    import mxnet as mx
    try:
        return mx.autograd.get_symbol(array).name
    except mx.base.MXNetError:
        return None


def _head_symbol(block, head):
    import mxnet as mx
    if not isinstance(head, mx.nd.NDArray):
        raise ModelTypeError(f"MXNet block {type(block).__name__} returns a {type(head).__name__} among its outputs; "
                             f"an MXNet graph holds arrays only: return NDArrays from forward")
    return mx.autograd.get_symbol(head)


def _variable_names(params: dict, inputs: dict) -> dict:
    """MXNet's counter name (``var3``, ``null8``) -> the name of the parameter or input it is."""
    named = {}
    for name, array in {**params, **inputs}.items():
        counter = _node_name(array)
        if counter is not None:
            named.setdefault(counter, name)
    return named


def _constants(document: dict, names: dict, arguments: list) -> dict:
    """``constant<n>`` -> (MXNet's counter name, the array) for each variable that is neither a parameter nor an
    input: an array the forward made from no recorded value, found among the arrays the recorded ops read.

    Raises:
        ModelTypeError: such a variable's array was not seen (made by an op ``mx.np`` runs outside this watch).
    """
    wanted = [n["name"] for n in document["nodes"] if n["op"] == "null" and n["name"] not in names]
    found = {}
    for array in arguments:
        if len(found) == len(wanted):
            break
        counter = _node_name(array)
        if counter in wanted and counter not in found:
            found[counter] = array
    missing = [w for w in wanted if w not in found]
    if missing:
        raise ModelTypeError(f"the recorded graph reads {len(missing)} array(s) that are neither parameters, inputs "
                             f"nor arrays the watched ops read ({missing[:5]}); make them Gluon parameters "
                             f"(params.get_constant) of the block")
    taken = set(names.values())
    out, k = {}, 0
    for counter in wanted:
        while f"constant{k}" in taken:
            k += 1
        out[f"constant{k}"], k = (counter, found[counter]), k + 1
    return out


def _check_cached_ops(block, document: dict) -> None:
    """ModelTypeError when the graph holds no op, or a ``_CachedOp`` (a child whose ops MXNet does not record one by
    one)."""
    if all(n["op"] == "null" for n in document["nodes"]):
        raise ModelTypeError(f"MXNet block {type(block).__name__}: its forward recorded no operation (it returns its "
                             f"inputs or parameters as they are); there is no graph to map or generate")
    opaque = [n["name"] for n in document["nodes"] if n["op"] == "_CachedOp"]
    if opaque:
        raise ModelTypeError(f"MXNet block {type(block).__name__}: {len(opaque)} child call(s) ran as one _CachedOp "
                             f"whose operations MXNet does not record (a SymbolBlock, or a block hybridized outside "
                             f"the block tree); give the block whose children are Gluon blocks, or export the "
                             f"SymbolBlock's symbol/params files and read those")


def _counter_of(node: dict) -> int:
    """The counter MXNet named a recorded op by (``node_41`` -> 41): the order the forward ran the ops in."""
    return int(node["name"][len("node_"):])


def _copies_as_casts(document: dict, written: dict) -> None:
    """Each ``_copyto`` node (``x.astype(dtype)``, ``x.copyto(y)``: the output array given, its dtype nowhere in the
    graph) becomes the ``Cast`` to the dtype of the array it wrote."""
    import numpy as np
    for node in document["nodes"]:
        if node["op"] == "_copyto" and node["name"] in written:
            node["op"], node["attrs"] = "Cast", {"dtype": np.dtype(written[node["name"]]).name}


def _with_gradient_stops(document: dict, paused: set) -> dict:
    """``document`` with a ``BlockGrad`` node on each output of a node in ``paused`` (recorded while the forward had
    paused recording) that a node outside ``paused`` or a head reads: MXNet computes no gradient through them."""
    nodes, out, moved, stops = document["nodes"], [], {}, {}
    for i, node in enumerate(nodes):
        inputs = [_stopped(entry, i, paused, moved, stops, nodes, out) for entry in node["inputs"]]
        moved[i] = len(out)
        out.append({**node, "inputs": inputs})
    heads = [_stopped(entry, None, paused, moved, stops, nodes, out) for entry in document["heads"]]
    return {"nodes": out, "arg_nodes": [i for i, n in enumerate(out) if n["op"] == "null"], "heads": heads,
            "attrs": document.get("attrs", {})}


def _stopped(entry, reader, paused, moved, stops, nodes, out) -> list:
    """The entry ``entry`` (an input of node ``reader``, None for a head) in the rewritten node list ``out``: through
    a ``BlockGrad`` node (made once per entry) where the entry comes from a paused node and ``reader`` is not one."""
    source, index = entry[0], entry[1]
    if source not in paused or reader in paused:
        return [moved[source], index, 0]
    if (source, index) not in stops:
        suffix = f"{index}" if index else ""
        out.append({"op": "BlockGrad", "name": f"{nodes[source]['name']}_paused{suffix}",
                    "inputs": [[moved[source], index, 0]]})
        stops[source, index] = len(out) - 1
    return [stops[source, index], 0, 0]


def _name_nodes(document: dict, variables: dict, owners: "_Owners") -> None:
    """Names every node of ``document`` in place: variables from ``variables``, ops from the block that ran them."""
    nodes = document["nodes"]
    calls = collections.defaultdict(list)
    for i, node in enumerate(nodes):
        if node["op"] == "null":
            node["name"] = variables.get(node["name"], node["name"])
        elif node["name"].startswith("node_"):
            calls[owners.call_of(_counter_of(node))].append(i)
    counts, fwd = collections.Counter(), collections.Counter()
    for call, members in sorted(calls.items(), key=lambda item: item[1][0]):
        prefix = owners.prefix(call)
        if len(members) == 1:
            nodes[members[0]]["name"] = f"{prefix}fwd{fwd[prefix] or ''}"
            fwd[prefix] += 1
            continue
        for i in members:
            hint = nodes[i]["op"].lower().lstrip("_")
            nodes[i]["name"] = f"{prefix}{hint}{counts[prefix, hint]}"
            counts[prefix, hint] += 1


class _Owners:
    """Which block call each recorded op belongs to: the calls' begin and end counters, innermost call wins."""

    def __init__(self, root):
        self.counters, self.calls, self.stack, self.blocks = [-1], [0], [0], {0: root}

    def enter(self, block, counter: int) -> None:
        call = len(self.blocks)
        self.blocks[call] = block
        self.stack.append(call)
        self._mark(counter)

    def leave(self, counter: int) -> None:
        if len(self.stack) > 1:
            self.stack.pop()
        self._mark(counter)

    def _mark(self, counter: int) -> None:
        self.counters.append(counter)
        self.calls.append(self.stack[-1])

    def call_of(self, counter: int) -> int:
        """The innermost block call running when op ``node_<counter>`` was recorded."""
        return self.calls[bisect.bisect_right(self.counters, counter) - 1]

    def prefix(self, call: int) -> str:
        return self.blocks[call].prefix


class _Watch(contextlib.AbstractContextManager):
    """While a recorded Block runs: hooks on each block call (``_Owners``), hybridized children run op by op, the
    arrays ops read kept (constants' values), reads of recorded values into Python and ops run paused noted."""

    def __init__(self, root):
        import mxnet as mx
        self.mx, self.root = mx, root
        self.owners, self.arguments, self.reads, self.paused = _Owners(root), [], [], []
        self.pauses = []  # (counter at entry, counter at exit) of each autograd.pause() recorded through
        self.written = {}  # node name -> dtype of the array an op wrote into (``out=``: astype's _copyto)
        self.training = {}  # node name -> file:line of an op recorded in a training mode the forward forced
        self._probe = mx.nd.zeros((1,))
        self._probe.attach_grad()
        self._undo = []

    def __enter__(self):
        mx = self.mx
        for block in _blocks(self.root):
            self._undo.append(block.register_forward_pre_hook(self._pre_hook).detach)
            self._undo.append(block.register_forward_hook(self._post_hook).detach)
            if isinstance(block, mx.gluon.HybridBlock) and block._active:
                block._active = False
                self._undo.append(lambda b=block: setattr(b, "_active", True))
        self._patch(mx.nd.register, "_imperative_invoke", self._invoke)
        self._patch(mx.nd.NDArray, "asnumpy", self._asnumpy)
        self._patch(mx.autograd, "pause", self._pause)
        return self

    def __exit__(self, *exc):
        while self._undo:
            self._undo.pop()()
        return False

    def _patch(self, owner, name: str, make) -> None:
        original = getattr(owner, name)
        setattr(owner, name, make(original))
        self._undo.append(lambda: setattr(owner, name, original))

    def _counter(self) -> int | None:
        if not self.mx.autograd.is_recording():
            return None
        return int(self.mx.autograd.get_symbol(self._probe * 1).name[len("node_"):])

    def _pre_hook(self, block, args) -> None:
        counter = self._counter()
        if counter is not None:
            self.owners.enter(block, counter)

    def _post_hook(self, block, args, out) -> None:
        counter = self._counter()
        if counter is not None:
            self.owners.leave(counter)

    def _invoke(self, original):
        def invoke(handle, ndargs, keys, vals, out, *rest):
            recording = self.mx.autograd.is_recording()
            if recording:
                self.arguments.extend(ndargs)
            elif any(_recorded(a) for a in ndargs):
                self.paused.append(_caller())
            result = original(handle, ndargs, keys, vals, out, *rest)
            for array in (out if isinstance(out, (list, tuple)) else [out]) if recording and out is not None else []:
                self.written[_node_name(array)] = array.dtype
            if recording and self.mx.autograd.is_training():  # recorded in eval mode: the forward forced training
                made = out if out is not None else result
                for array in made if isinstance(made, (list, tuple)) else [made]:
                    self.training[_node_name(array)] = _caller()
            return result
        return invoke

    def _pause(self, original):
        @contextlib.contextmanager
        def pause(train_mode=False):
            start = self._counter()
            if start is None:
                with original(train_mode):
                    yield
                return
            with self.mx.autograd.record(train_mode=train_mode):
                yield
            self.pauses.append((start, self._counter()))
        return pause

    def paused_nodes(self, document: dict) -> set:
        """The indices of ``document``'s op nodes recorded inside an ``autograd.pause()`` (recorded through)."""
        return {i for i, node in enumerate(document["nodes"]) if node["op"] != "null"
                and any(a < _counter_of(node) < b for a, b in self.pauses)}

    def _asnumpy(self, original):
        def asnumpy(array):
            if _recorded(array) and array is not self._probe:
                self.reads.append(_caller())
            return original(array)
        return asnumpy


def _blocks(root) -> list:
    """``root`` and every block under it, each once."""
    out, todo, seen = [], [root], set()
    while todo:
        block = todo.pop()
        if id(block) not in seen:
            seen.add(id(block))
            out.append(block)
            todo.extend(block._children.values())
    return out


def _caller() -> str:
    """``file:line`` of the innermost frame outside MXNet and this module (the model's code that made the call)."""
    mx_root = os.path.dirname(os.path.abspath(sys.modules["mxnet"].__file__))
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        generated = frame.f_code.co_filename.startswith("<")  # MXNet's op functions, made by exec
        if not generated and not path.startswith(mx_root) and os.path.dirname(path) != _HERE:
            return f"{path}:{frame.f_lineno} ({frame.f_code.co_name})"
        frame = frame.f_back
    return "unknown"
