"""The registry of MXNet op translators: MXNet op name -> the function that writes one node's torch code.

A translator takes an ``OpNode`` and returns a Python expression (a string) that computes the node's output(s) from
``node.inputs`` (expressions of the input values). What the expression uses beyond torch is named by object, never
by a string: ``node.call(mx_topk, x, ...)`` calls a helper function, ``node.layer(nn.Conv2d, ...)`` builds a torch
layer in the generated ``__init__`` and returns its call (or None where the node cannot hold a layer: the translator
then writes the function call). The generator copies the source of each helper and layer class a file uses, and of
what those use, into the file (``emitted``). Registering an op twice is an error; looking up an unknown op names the
op, the node and the nearest known op names.
"""
from __future__ import annotations

import ast
import difflib
import math
from dataclasses import dataclass, field
from typing import Callable, Protocol

from migrate.errors import UnsupportedOpError

__all__ = ["OpNode", "LayerSite", "register", "translator", "known_ops", "documentation_name", "as_tuple",
           "MULTI_OUTPUT"]

MULTI_OUTPUT = {"SliceChannel", "split", "RNN"}
"""Ops whose translation returns a tuple even where MXNet's node has one output (it is read as ``value[0]``)."""

_TRANSLATORS: dict[str, Callable] = {}


class LayerSite(Protocol):
    """Where the generator puts the layers translators ask for (``module_tree.ModuleTree``)."""

    def place(self, cls: type, args: tuple, kwargs: dict, keys: dict, block: str | None) -> str | None:
        """The forward expression of the layer ``cls(*args, **kwargs)`` holding the parameters ``keys`` (the
        layer's attribute name -> state_dict key), or at module path ``block`` when it holds none; None where it
        cannot go there."""


def as_tuple(value) -> tuple:
    """An MXNet tuple attribute as a tuple (a bare value becomes a 1-tuple).

    Example:
        >>> as_tuple(3), as_tuple([1, 2])
        ((3,), (1, 2))
    """
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


@dataclass
class OpNode:
    """One MXNet graph node as a translator sees it.

    Attributes:
        op: the MXNet op name (``Convolution``).
        name: the MXNet node name (``resnetv10_conv0_fwd``).
        attrs: the node's attributes as MXNet writes them (strings).
        inputs: Python expressions of the node's inputs, in MXNet's input order.
        in_shapes: the inputs' shapes (None where MXNet could not infer one).
        out_shape: the shape of the node's first output (None if unknown).
        in_ops: for each input, ``(op, attrs)`` of the node that makes it (``("null", {...})`` for a variable).
        param_keys: for each input, the state_dict key of the parameter it reads (None for other inputs).
        last_read: for each input, whether it is an op's output that no later node reads (an in-place op on it is
            safe where its producer's backward does not need it).
        block: the module path of the parameterless Gluon block that made this node alone (None: none known).
        site: where layers go (None: the node is written as function calls only, as ``shapes`` evaluates them).
        emitted: the helper functions and layer classes the expression uses (the generator copies them).
        subgraphs: the symbol documents of the node's subgraphs (``_foreach``'s loop body).
        statements: lines the translator writes before the node's own line (``_foreach``'s loop), whose names the
            expression reads.
    """

    op: str
    name: str
    attrs: dict
    inputs: list
    in_shapes: list = field(default_factory=list)
    out_shape: tuple = None
    in_ops: list = field(default_factory=list)
    param_keys: list = field(default_factory=list)
    last_read: list = field(default_factory=list)
    block: str = None
    site: LayerSite = None
    emitted: set = field(default_factory=set)
    subgraphs: list = field(default_factory=list)
    statements: list = field(default_factory=list)

    def attr(self, key: str, default=None):
        """The attribute ``key`` parsed as a Python literal (``"(3, 3)"`` -> ``(3, 3)``, ``"True"`` -> True)."""
        if key not in self.attrs:
            return default
        text = self.attrs[key]
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return {"true": True, "false": False, "none": None}.get(text.lower(), text)
        return value

    def tuple_attr(self, key: str, default=()) -> tuple:
        """The attribute ``key`` as a tuple (a bare value becomes a 1-tuple; absent or None gives ``default``)."""
        value = self.attr(key)
        return tuple(default) if value is None else as_tuple(value)

    def torch_dtype(self, default: str = "float32") -> str:
        """The ``dtype`` attribute as a torch dtype expression (``torch.int32``); ``default`` where the node has none
        (absent, empty or ``None``)."""
        value = self.attr("dtype")
        return f"torch.{default if value in (None, '', 'None') else value}"

    def optional_input(self, index: int):
        """The expression of input ``index``, or None where the node has fewer inputs."""
        return self.inputs[index] if len(self.inputs) > index else None

    def call(self, fn: Callable, *args) -> str:
        """The expression calling helper ``fn`` on ``args`` (``fn`` is copied into the generated file).

        Example:
            >>> node.call(mx_topk, "x", -1, 2)  # doctest: +SKIP
            'mx_topk(x, -1, 2)'
        """
        self.emitted.add(fn)
        return f"{fn.__name__}({', '.join(str(a) for a in args)})"

    def layer(self, cls: type, *args, params: dict | None = None, call: tuple | None = None, **kwargs) -> str | None:
        """The call of layer ``cls(*args, **kwargs)``, built in the generated ``__init__``, or None where this node
        cannot hold one (its parameters are not one Gluon block's, that block holds another layer, or the node was
        made by no block of its own): the translator then writes the function call.

        Args:
            cls: a ``torch.nn`` layer class, or a layer class of an op module (copied into the file).
            args: the layer's positional arguments (Python values, written with ``repr``).
            params: the layer's parameter and buffer attribute names -> the index of the node input each holds
                (``{"weight": 1, "bias": 2}``); none for a layer without parameters.
            call: expressions of the forward call's arguments (default: the node's first input).
            kwargs: the layer's keyword arguments.

        Example:
            >>> node.layer(nn.Conv2d, 3, 8, (3, 3), params={"weight": 1})  # doctest: +SKIP
            'self.features[0](data)'
        """
        if self.site is None:
            return None
        keys = {attr: self.param_keys[i] if i < len(self.param_keys) else None for attr, i in (params or {}).items()}
        module = self.site.place(cls, args, kwargs, keys, self.block)
        if module is None:
            return None
        if not cls.__module__.startswith("torch."):
            self.emitted.add(cls)
        return f"{module}({', '.join(call if call is not None else self.inputs[:1])})"

    def namespace(self) -> dict:
        """The names the node's expression reads besides ``self`` and its inputs: torch, ``nn``, ``F``, ``math``
        and the helpers it calls (to evaluate it without writing a file, as ``shapes`` does)."""
        import torch
        return {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "math": math,
                **{obj.__name__: obj for obj in self.emitted}}

    def unsupported(self, what: str) -> UnsupportedOpError:
        """The error for an attribute value this op's translation does not cover."""
        return UnsupportedOpError(f"MXNet node {self.name!r} (op {self.op}): {what} has no PyTorch translation; "
                                  f"rewrite that layer in MXNet with supported settings, or extend its translator in "
                                  f"migrate/generate/ops/")


def register(*ops: str):
    """Decorator: register the decorated function as the translator of each MXNet op in ``ops``.

    Raises:
        ValueError: an op already has a translator.

    Example:
        >>> @register("relu")
        ... def _relu(node): return f"F.relu({node.inputs[0]})"  # doctest: +SKIP
    """
    def decorate(fn):
        for op in ops:
            if op in _TRANSLATORS:
                raise ValueError(f"MXNet op {op!r} is registered twice ({_TRANSLATORS[op].__name__} and "
                                 f"{fn.__name__}); keep one translator per op")
            _TRANSLATORS[op] = fn
        return fn
    return decorate


def translator(op: str, node_name: str) -> Callable:
    """The translator of MXNet op ``op``.

    Raises:
        UnsupportedOpError: no translator is registered (names the op, the node, the op's name in MXNet's
            documentation and the nearest known ops).

    Example:
        >>> translator("Convolution", "conv0_fwd")  # doctest: +ELLIPSIS
        <function _convolution at ...>
    """
    if op not in _TRANSLATORS:
        near = difflib.get_close_matches(op, _TRANSLATORS, n=3, cutoff=0.5)
        raise UnsupportedOpError(f"MXNet node {node_name!r} uses op {op!r} (documented as {documentation_name(op)}),"
                                 f" which has no PyTorch translation (nearest known ops: {near or 'none'}); replace "
                                 f"the layer in MXNet, or add a translator with @register({op!r}) in the op module "
                                 f"of its family in migrate/generate/ops/")
    return _TRANSLATORS[op]


_NAMESPACES = (("_contrib_", "contrib."), ("_linalg_", "linalg."), ("_image_", "image."), ("_random_", "random."),
               ("_npx_", "npx."), ("_npi_", "numpy."), ("_np_", "numpy."))
_OPERATORS = {"equal": "__eq__", "not_equal": "__ne__", "greater": "__gt__", "greater_equal": "__ge__",
              "lesser": "__lt__", "lesser_equal": "__le__", "plus": "__add__", "minus": "__sub__",
              "rminus": "__rsub__", "mul": "__mul__", "div": "__truediv__", "rdiv": "__rtruediv__", "mod": "__mod__",
              "rmod": "__rmod__", "power": "__pow__", "rpower": "__rpow__"}
_CONTROL_FLOW = {"_foreach": "foreach", "_while_loop": "while_loop", "_cond": "cond"}


def documentation_name(op: str) -> str:
    """The name under which MXNet 1.9's documentation describes graph op ``op``.

    Example:
        >>> documentation_name("_contrib_box_nms"), documentation_name("_greater_scalar")
        ('mxnet.symbol.contrib.box_nms', 'mxnet.symbol.Symbol.__gt__ with a scalar')
    """
    if op in _CONTROL_FLOW:
        return f"mxnet.symbol.contrib.{_CONTROL_FLOW[op]}"
    if op.startswith(("_sg_mkldnn_", "_sg_onednn_")):
        return f"{op}, a fused subgraph op MXNet's MKLDNN backend writes (undocumented; export before fusing)"
    for prefix, namespace in _NAMESPACES:
        if op.startswith(prefix):
            return f"mxnet.symbol.{namespace}{op[len(prefix):]}"
    if op.endswith("_scalar") and op[1:-len("_scalar")] in _OPERATORS:
        return f"mxnet.symbol.Symbol.{_OPERATORS[op[1:-len('_scalar')]]} with a scalar"
    return f"mxnet.symbol.{op.lstrip('_')}"


def known_ops() -> list:
    """The MXNet op names with a translator, sorted."""
    return sorted(_TRANSLATORS)
