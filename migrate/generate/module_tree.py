"""The module tree of a generated class: which layer each Gluon block becomes, and the ``__init__`` that builds it.

Translators ask for layers (``OpNode.layer``); ``ModuleTree.place`` puts one where the node's parameters live when
they are exactly one block's (``features.0.weight`` and ``features.0.bias``: ``features[0]`` becomes the
``nn.Conv2d`` holding them, under the same keys), or, for a layer without parameters, at the path of the Gluon block
that made the node (``names.block_paths``). A block called twice is one layer called twice; a path that already holds
another layer, or parameters the layer does not hold, gets none (the node is written as a function call on the
parameters). Parameters and buffers no layer holds stay in ``Block`` containers, under the same keys.

A Gluon block that holds only parameters, read by one node's function calls (GluonCV's ``Normalize`` scale, an SSD
anchor generator), becomes a small module written into the file: its parameters in ``__init__``, the node's
translation as its ``forward`` (``parameter_module``), as a torch user writes an ``L2Norm`` or an anchor generator;
the keys stay (``features.norm4.scale``) and a forward hook on it sees the node's output.

``init_lines`` writes the tree as torch code: nested constructors, ``Block(...)`` for a Gluon block that holds
others (its numbered children positional, ``None`` where a number holds nothing, its named children keywords).

Examples:
    >>> tree = ModuleTree({"features.0.weight": ((8, 3, 3, 3), "float32", False)})  # doctest: +SKIP
    >>> tree.place(nn.Conv2d, (3, 8, (3, 3)), {"bias": False}, {"weight": "features.0.weight"}, None)  # doctest: +SKIP
    'self.features[0]'
"""
from __future__ import annotations

import collections
import itertools
import re
from dataclasses import dataclass

import numpy as np

from migrate.generate.registry import MULTI_OUTPUT, OpNode, translator

__all__ = ["ModuleTree", "Spec", "module_expression", "parameter_module", "parameter_readers"]

_LINE = 100  # a constructor that fits in this many characters is written on one line


class Spec(tuple):
    """(shape, numpy dtype name, is a buffer) of one state_dict entry."""

    @property
    def shape(self) -> tuple:
        return self[0]

    @property
    def dtype(self) -> str:
        return self[1]

    @property
    def buffer(self) -> bool:
        return self[2]


def module_expression(path: str) -> str:
    """The forward's expression of module or tensor ``path``: ``features.3.weight`` -> ``self.features[3].weight``."""
    return "self" + "".join(f"[{s}]" if s.isdigit() else f".{s}" for s in path.split(".")) if path else "self"


class ModuleTree:
    """The layers of a generated module and the state_dict entries no layer holds.

    Args:
        specs: state_dict key -> ``Spec`` of every parameter and buffer of the model.
        order: module paths and keys in the order the tree lists them (Gluon's); others follow in first use.
        classes: module path -> the class name of the Gluon block there (names the modules ``place_module``
            writes; from files, the path names them).
    """

    def __init__(self, specs: dict, order=(), classes=None):
        self.specs = {key: Spec(spec) for key, spec in specs.items()}
        self.layers = {}  # module path -> constructor text (a _Written until ``module_classes`` names its class)
        self.held = set()  # keys layers hold
        self.classes = dict(classes or {})
        self._order = {path: i for i, path in enumerate(order)}

    def place(self, cls: type, args: tuple, kwargs: dict, keys: dict, block: str | None) -> str | None:
        """The forward expression of layer ``cls(*args, **kwargs)`` placed where ``keys`` (layer attribute ->
        state_dict key) live, or at ``block`` for a layer holding none; None where it cannot go (see the module
        docstring)."""
        path = self._layer_path(keys) if keys else block
        if path is None or not self._free(path, keys):
            return None
        dtypes = {self.specs[key].dtype for key in keys.values()}
        if len(dtypes) > 1:
            return None
        if dtypes and dtypes != {"float32"}:
            kwargs = dict(kwargs, dtype=f"torch.{dtypes.pop()}")
        text = _constructor(cls, args, kwargs)
        if self.layers.get(path, text) != text:
            return None
        self.layers[path] = text
        self.held.update(keys.values())
        self.touch(path)
        return module_expression(path)

    def place_module(self, path: str, fields: dict, args: list, body: str, op: str) -> str | None:
        """The forward expression of a module written for the block at ``path``: it holds ``fields`` (attribute ->
        state_dict key: every key under ``path``) and its forward takes ``args`` and returns ``body``; None where
        the block holds anything else or its tensors differ in dtype."""
        dtypes = {self.specs[key].dtype for key in fields.values()}
        if not path or len(dtypes) != 1 or not self._free(path, fields):
            return None
        kind = _ModuleClass(self.classes.get(path) or _path_class(path), path in self.classes, op, tuple(
            (attr, self.specs[key].buffer) for attr, key in fields.items()), tuple(args), body)
        self.layers[path] = _Written(kind, tuple(self.specs[key].shape for key in fields.values()), dtypes.pop())
        self.held.update(fields.values())
        self.touch(path)
        return module_expression(path)

    def module_classes(self, taken: set) -> list:
        """The source of each class ``place_module`` wrote, named after its Gluon block (a number added where two
        differ or a name in ``taken`` has it); the constructors in the tree then name them."""
        kinds = list(dict.fromkeys(v.kind for v in self.layers.values() if isinstance(v, _Written)))
        names, taken = {}, set(taken)
        for kind in kinds:
            names[kind] = next(kind.name + (str(k) if k > 1 else "") for k in itertools.count(1)
                               if kind.name + (str(k) if k > 1 else "") not in taken)
            taken.add(names[kind])
        for path, value in self.layers.items():
            if isinstance(value, _Written):
                self.layers[path] = value.constructor(names[value.kind])
        return [kind.source(names[kind]) for kind in kinds]

    def touch(self, path: str) -> None:
        """Note that the forward uses ``path`` here (containers list their children in first-use order)."""
        self._order.setdefault(path, len(self._order))

    def _layer_path(self, keys: dict) -> str | None:
        """The one module path of ``keys`` whose leaves are the layer's attribute names, else None."""
        paths = {key.rsplit(".", 1)[0] if key and "." in key else None for key in keys.values()}
        path = paths.pop() if len(paths) == 1 else None
        if path is None or any(key != f"{path}.{attr}" for attr, key in keys.items()):
            return None
        return path

    def _free(self, path: str, keys: dict) -> bool:
        """Whether a layer holding ``keys`` may stand at ``path``: no other key lies under it, no key or other layer
        is it or contains it."""
        inside = {key for key in self.specs if key.startswith(path + ".")}
        ancestors = {".".join(path.split(".")[:i]) for i in range(1, path.count(".") + 1)}
        return (inside == set(keys.values()) and path not in self.specs and not ancestors & set(self.layers)
                and not ancestors & set(self.specs)
                and not any(other.startswith(path + ".") for other in self.layers))

    def init_lines(self) -> list:
        """The statements of ``__init__`` after ``super().__init__()`` that build the tree (each top-level child
        assigned; buffers registered)."""
        tree = self._tree()
        lines = []
        for name, node in tree.items():
            if isinstance(node, Spec) and node.buffer:
                lines.append(f"self.register_buffer({name!r}, {_tensor(node)})")
            else:
                lines += _assignment(f"self.{name} = " if not name.isdigit() else f"self.add_module({name!r}, ",
                                     _expression(node), ")" if name.isdigit() else "")
        return lines

    def _tree(self) -> dict:
        """Nested dicts of the paths: a layer is its constructor text, a loose key its ``Spec``."""
        loose = [key for key in self.specs if key not in self.held]
        for key in loose:
            self.touch(key)
        entries = sorted([*self.layers, *loose], key=lambda p: self._order.get(p, len(self._order)))
        root = {}
        for path in entries:
            *parents, leaf = path.split(".")
            node = root
            for name in parents:
                node = node.setdefault(name, {})
            node[leaf] = self.layers[path] if path in self.layers else self.specs[path]
        return root

    def root_has_numbers(self) -> bool:
        """Whether the model itself has numbered children (a HybridSequential model): its class is then a Block."""
        return any(path.split(".")[0].isdigit() for path in [*self.layers, *self.specs])


@dataclass(frozen=True)
class _ModuleClass:
    """A class written for a parameter-holding Gluon block: blocks that read their tensors alike share one."""

    name: str
    gluon: bool  # named after the Gluon block's class (else after its path: files name no classes)
    op: str
    fields: tuple  # (attribute, is a buffer) per tensor
    args: tuple
    body: str

    def source(self, name: str) -> str:
        init = [f"self.register_buffer({attr!r}, torch.zeros({attr}_shape, dtype=dtype))" if buffer else
                f"self.{attr} = nn.Parameter(torch.zeros({attr}_shape, dtype=dtype))" for attr, buffer in self.fields]
        shapes = ", ".join(f"{attr}_shape" for attr, _ in self.fields)
        block = f"The Gluon block {self.name}" if self.gluon else "A block of MXNet parameters"
        return "\n".join([
            f"class {name}(nn.Module):",
            f'    """{block}: {self.op} on its {", ".join(attr for attr, _ in self.fields)}."""', "",
            f"    def __init__(self, {shapes}, dtype=None):", "        super().__init__()",
            *["        " + line for line in init], "",
            f"    def forward(self, {', '.join(self.args)}):", f"        return {self.body}"])


@dataclass(frozen=True)
class _Written:
    """A module of a ``_ModuleClass`` in the tree: its tensors' shapes and dtype."""

    kind: _ModuleClass
    shapes: tuple
    dtype: str

    def constructor(self, name: str) -> str:
        dtype = "" if self.dtype == "float32" else f", dtype=torch.{self.dtype}"
        return f"{name}({', '.join(repr(tuple(s)) for s in self.shapes)}{dtype})"


def _path_class(path: str) -> str:
    """A class name read from a module path (files name no classes): ``anchor_generator.0`` -> ``AnchorGenerator``."""
    segment = next((s for s in reversed(path.split(".")) if not s.isdigit()), "") or "Parameters"
    return "".join(part.capitalize() for part in re.sub(r"\d+$", "", segment).split("_") if part) or "Parameters"


_ARGUMENTS = ("x", "y", "z")


def parameter_readers(nodes: list, keys: dict) -> collections.Counter:
    """state_dict key -> how many op nodes of the graph read that parameter (``keys``: MXNet name -> key)."""
    return collections.Counter(keys[nodes[i]["name"]] for node in nodes if node["op"] != "null"
                               for i in {entry[0] for entry in node["inputs"]}
                               if nodes[i]["op"] == "null" and nodes[i]["name"] in keys)


def parameter_module(node: OpNode, tree: ModuleTree, readers: collections.Counter) -> str | None:
    """The call of a module written for the Gluon block whose tensors ``node`` reads by function calls (its forward
    the node's translation on them: ``x1 = self.features.norm4(x1)``), or None: the node reads no parameters, takes
    no data, or returns several values, another node reads them, a layer holds them, or the block holds more.

    Examples:
        >>> parameter_module(node, tree, readers)  # doctest: +SKIP
        'self.features.norm4(x1)'
    """
    keys = {i: key for i, key in enumerate(node.param_keys) if key is not None}
    data = [i for i in range(len(node.inputs)) if i not in keys]
    paths = {key.rpartition(".")[0] for key in keys.values()}
    if (not keys or not data or len(paths) != 1 or node.statements or node.op in MULTI_OUTPUT
            or tree.held & set(keys.values()) or any(readers[key] != 1 for key in keys.values())):
        return None
    path = paths.pop()
    args = dict(zip(data, _ARGUMENTS + tuple(f"x{k}" for k in range(3, len(data)))))
    own = OpNode(node.op, node.name, node.attrs, [f"self.{keys[i].rpartition('.')[2]}" if i in keys else args[i]
                                                  for i in range(len(node.inputs))],
                 node.in_shapes, node.out_shape, in_ops=node.in_ops, param_keys=node.param_keys,
                 last_read=[False] * len(node.inputs), subgraphs=node.subgraphs)
    body = translator(node.op, node.name)(own)
    fields = {key.rpartition(".")[2]: key for key in dict.fromkeys(keys.values())}
    if own.statements or not set(re.findall(r"\bself\.(\w+)", body)) <= set(fields):  # self._device(): the model's
        return None
    module = tree.place_module(path, fields, list(args.values()), body, node.op)
    if module is None:
        return None
    node.emitted |= own.emitted
    return f"{module}({', '.join(node.inputs[i] for i in data)})"


def _constructor(cls: type, args: tuple, kwargs: dict) -> str:
    import torch
    name = f"nn.{cls.__name__}" if getattr(torch.nn, cls.__name__, None) is cls else cls.__name__
    written = [_literal(a) for a in args] + [f"{k}={_literal(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(written)})"


def _literal(value) -> str:
    return value if isinstance(value, str) and value.startswith("torch.") else repr(value)


def _tensor(spec: Spec) -> str:
    dtype = "" if spec.dtype == "float32" else f", dtype=torch.{np.dtype(spec.dtype).name}"
    return f"torch.zeros({tuple(spec.shape)!r}{dtype})"


def _expression(node) -> list:
    """Lines of the constructor of a tree node (the first line without indentation)."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, Spec):
        return [f"nn.Parameter({_tensor(node)})" if not node.buffer else _tensor(node)]
    numbered = sorted((int(k), v) for k, v in node.items() if k.isdigit())
    positional = [None] * (numbered[-1][0] + 1 if numbered else 0)
    for index, child in numbered:
        positional[index] = child
    items = [_expression(c) if c is not None else ["None"] for c in positional]
    items += [[f"{k}={line}" if i == 0 else line for i, line in enumerate(_expression(v))]
              for k, v in node.items() if not k.isdigit()]
    one_line = "Block(" + ", ".join(lines[0] for lines in items) + ")"
    if all(len(lines) == 1 for lines in items) and len(one_line) <= _LINE:
        return [one_line]
    out = ["Block("]
    for lines in items:
        out += ["    " + line for line in lines[:-1]] + ["    " + lines[-1] + ","]
    return out + [")"]


def _assignment(head: str, lines: list, tail: str) -> list:
    return [head + lines[0] + (tail if len(lines) == 1 else "")] + lines[1:-1] + (
        [lines[-1] + tail] if len(lines) > 1 else [])
