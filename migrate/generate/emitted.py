"""What a generated file holds besides its model class: the helper functions and layer classes its code uses.

Translators name what they emit by object (``node.call(mx_topk, ...)``, ``node.layer(BatchNorm, ...)``). An object
is emittable when an op module lists it in its ``__all__`` (``migrate/generate/ops/``); what one uses is read from
its code, as Python binds it: each global name of its code objects (nested functions and methods included) looked
up in its module, and its base classes. The file receives the closure, each object once, what it uses first, plus
the imports of the torch names they use beyond ``torch``, ``nn``, ``F`` and ``math``.

Examples:
    >>> [obj.__name__ for obj in closure({mx_topk})]  # doctest: +SKIP
    ['mx_cpu_order', ..., 'mx_topk']
"""
from __future__ import annotations

import inspect
import sys
import types

__all__ = ["closure", "emittable", "source_of", "imports_of", "free_globals", "STANDARD_NAMES"]

STANDARD_NAMES = frozenset({"torch", "nn", "F", "math"})  # the names every generated file imports


def emittable(value) -> bool:
    """Whether ``value`` is a helper or layer class an op module emits (listed in its module's ``__all__``)."""
    if not isinstance(value, (types.FunctionType, type)):
        return False
    module = sys.modules.get(getattr(value, "__module__", ""), None)
    return (module is not None and module.__name__.startswith("migrate.generate.ops.")
            and value.__name__ in getattr(module, "__all__", ()) and getattr(module, value.__name__) is value)


def free_globals(obj) -> dict:
    """The global names ``obj``'s code reads (its nested functions' and, for a class, its methods' too) -> the
    value each has in ``obj``'s module; a class's base classes count as read."""
    scope = vars(sys.modules[obj.__module__])
    codes = [fn.__code__ for fn in _functions(obj)]
    names = set()
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    if isinstance(obj, type):  # a base class named in the class statement (``nn.Module`` reads ``nn``)
        names.update(name for name, value in scope.items() if any(value is base for base in obj.__bases__))
    return {name: scope[name] for name in sorted(names) if name in scope}


def _functions(obj) -> list:
    if not isinstance(obj, type):
        return [obj]
    out = []
    for value in vars(obj).values():
        value = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
        if isinstance(value, types.FunctionType):
            out.append(value)
    return out


def closure(roots) -> list:
    """``roots`` and every emittable object they use, each once, an object after what it uses (then by name).

    Raises:
        RuntimeError: two different objects have the same name (the file can hold one): rename one.
    """
    order, seen = [], {}

    def visit(obj):
        if seen.get(obj.__name__) is obj:
            return
        if obj.__name__ in seen:
            raise RuntimeError(f"two emitted objects are named {obj.__name__!r} ({seen[obj.__name__].__module__} and "
                               f"{obj.__module__}); a generated file can hold one: rename one of them")
        seen[obj.__name__] = obj
        for value in free_globals(obj).values():
            if emittable(value) and value is not obj:
                visit(value)
        order.append(obj)
    for root in sorted(roots, key=lambda o: o.__name__):
        visit(root)
    return order


def source_of(objects) -> str:
    """The source of ``objects`` as they read in their op modules, separated by two blank lines."""
    return "\n\n".join(inspect.getsource(obj) for obj in objects)


def imports_of(objects) -> list:
    """Import lines for the names ``objects`` use that are neither emitted nor every file's own (``torch``, ``nn``,
    ``F``, ``math``): ``from torch.nn.modules.batchnorm import _BatchNorm``."""
    lines = set()
    for obj in objects:
        for name, value in free_globals(obj).items():
            if name in STANDARD_NAMES or emittable(value) or isinstance(value, types.ModuleType):
                continue
            lines.add(f"from {value.__module__} import {value.__name__}" + (
                "" if value.__name__ == name else f" as {name}"))
    return sorted(lines)
