"""The text of a generated file: its docstring, imports, ``MXNET_NAMES``, the helpers and layer classes its code
uses (copied from the op modules), the classes written for parameter-holding blocks (``ModuleTree.place_module``),
and the model class (``__init__`` building the module tree, ``forward``).

Examples:
    >>> text = file_text(GeneratedClass("Net", "Gluon block Net", [("data", (1, 3))], lines, emitted, names, tree))
    ... # doctest: +SKIP
"""
from __future__ import annotations

import itertools
import linecache
import textwrap
import types
import weakref
from dataclasses import dataclass

from migrate.generate.emitted import STANDARD_NAMES, closure, imports_of, source_of
from migrate.generate.module_tree import ModuleTree
from migrate.generate.ops.layers import Block

__all__ = ["GeneratedClass", "file_text", "in_memory_module"]

_IN_MEMORY = itertools.count()  # numbers the sources of modules run from memory

_IMPORTS = ["import math  # noqa: F401", "", "import torch", "import torch.nn.functional as F  # noqa: F401",
            "from torch import nn  # noqa: F401"]


@dataclass
class GeneratedClass:
    """What the file's model class is made of.

    Attributes:
        name: the class name.
        origin: what it translates (``Gluon block ResNetV1``, ``symbol file net-symbol.json``).
        inputs: (argument name, shape it was generated for) per forward argument.
        lines: the statements of ``forward``.
        emitted: the helpers and layer classes ``lines`` and the tree use (their closure is copied).
        mx_names: MXNet parameter name -> state_dict key.
        tree: the module tree ``__init__`` builds.
        notes: what the graph holds that the MXNet model may not (``MxSource.notes``: a recorded Block's path, a
            Module's cut loss head), written into the file's docstring.
    """

    name: str
    origin: str
    inputs: list
    lines: list
    emitted: set
    mx_names: dict
    tree: ModuleTree
    notes: tuple = ()


def file_text(model: GeneratedClass) -> str:
    """The generated file's text (imports only torch)."""
    every = closure(model.emitted | {Block})
    written = model.tree.module_classes({model.name, *STANDARD_NAMES, *(obj.__name__ for obj in every),
                                         *(line.split()[-1] for line in imports_of(every))})
    init = model.tree.init_lines()
    blocks = any("Block(" in line for line in init) or model.tree.root_has_numbers()
    objects = closure(model.emitted | ({Block} if blocks else set()))
    parts = [_docstring(model), "\n".join(_IMPORTS + imports_of(objects))]
    parts += [source_of(objects).rstrip("\n")] if objects else []
    parts += written
    parts.append(_class(model, init, "Block" if model.tree.root_has_numbers() else "nn.Module"))
    parts.append(f"MXNET_NAMES = {model.name}.MXNET_NAMES")
    return "\n\n\n".join(parts) + "\n"


def _docstring(model: GeneratedClass) -> str:
    inputs = ", ".join(f"{name} {shape}" for name, shape in model.inputs)
    return (f'"""PyTorch translation of the MXNet {model.origin}, written by migrate.generate_torch.\n\n'
            f"Inputs: {inputs}. The forward follows the MXNet graph op by op, in training mode too (BatchNorm's\n"
            f"MXNet momentum and biased running variance, fix_gamma, use_global_stats, Dropout). Standalone: imports\n"
            f'only torch. MXNET_NAMES maps each MXNet parameter name to its state_dict key.\n'
            + "".join(f"\n{_note(note)}\n" for note in model.notes) + '"""')


def _note(note: str) -> str:
    """A note as docstring lines: wrapped at 116 columns, with no backslash or triple quote to end it early."""
    text = note.replace("\\", "/").replace('"""', "'''")
    return textwrap.fill(f"Note: {text}", 116, break_on_hyphens=False, break_long_words=False)


def _names(mx_names: dict) -> list:
    """The class attribute ``MXNET_NAMES``: MXNet parameter name -> state_dict key (the mapping migrate reads)."""
    return ["MXNET_NAMES = {  # MXNet parameter name -> state_dict key (the mapping migrate reads)"] + [
        f"    {name!r}: {key!r}," for name, key in mx_names.items()] + ["}"]


def _class(model: GeneratedClass, init: list, base: str) -> str:
    body = "\n".join("        " + line for line in model.lines)
    device = any("self._device()" in line for line in model.lines)
    lines = [f"class {model.name}({base}):",
             f'    """The MXNet {model.origin} as a torch module (weights: load a state_dict, or use '
             f'migrate.generate_torch)."""', "",
             "    def __init__(self):", "        super().__init__()"]
    lines += ["        " + line for line in init]
    if device:
        lines += ["", "    def _device(self):",
                  '        """Where tensors the graph creates go (zeros, ones, arange, random): the device of the '
                  'weights."""',
                  "        for tensor in self.parameters():", "            return tensor.device",
                  "        for tensor in self.buffers():", "            return tensor.device",
                  '        return torch.device("cpu")']
    args = ", ".join(name for name, _ in model.inputs)
    lines += ["", f"    def forward(self, {args}):", body, ""] + ["    " + line for line in _names(model.mx_names)]
    return "\n".join(lines)


def in_memory_module(code: str, class_name: str) -> types.ModuleType:
    """The module ``code`` defines, run from memory, its source readable as a file's is (``inspect``, tracebacks:
    ``verify`` reads a forward's statements) while its class ``class_name`` lives."""
    filename = f"<migrate translated module {next(_IN_MEMORY)}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    module = types.ModuleType("migrate_translated")
    exec(compile(code, filename, "exec"), module.__dict__)
    weakref.finalize(getattr(module, class_name), linecache.cache.pop, filename, None)
    return module
