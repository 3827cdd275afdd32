"""A torch module run on numpy inputs with the outputs of some of its modules kept: what ``verify`` and
``check_training`` read of a torch model, and of the graph's translation where it stands in for MXNet
(``migrate.source.translated``). The hooks are put on from outside: nothing of this lives in the model.

A node's torch output is read where the model computes it: a layer's by a forward hook on it; a node computed by the
model's own code from a parameter (a generated module's function call on a Gluon block's tensor, ``x * self.scale``
in a hand-written forward) from the forward statement that reads the parameter (``node_sites`` names which). The
model's file stays as it is: for the forward call, the module runs a copy of its ``forward`` with the value of that
statement kept after it.

Examples:
    >>> with captured_module_outputs(model, ["conv1"]) as found:  # doctest: +SKIP
    ...     model(*torch_inputs([x]))
    >>> found["conv1"].shape  # doctest: +SKIP
    torch.Size([1, 64, 16, 16])
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import textwrap
import types

import numpy as np

__all__ = ["captured_module_outputs", "node_sites", "torch_inputs"]


def torch_inputs(inputs: list) -> list:
    """The numpy inputs as torch tensors (integers as int64, what embeddings take), sharing memory where they can."""
    import torch
    return [torch.from_numpy(x).long() if np.issubdtype(x.dtype, np.integer) else torch.from_numpy(x)
            for x in inputs]


@contextlib.contextmanager
def captured_module_outputs(model, modules):
    """Within the block, every forward of ``model`` records a copy of each named module's output (a forward hook on
    it, removed when the block ends): yields the dict module path -> output (torch tensors, detached). A name that is
    a parameter or buffer key (``node_sites``) records the value of the first forward statement that reads that
    tensor (``x = data * self.features.init_scale``), in the forward of the module holding it or of the nearest one
    above it whose code reads it; where none does, the output of the module holding it. A module that runs twice
    keeps its first output: the call of the op that first reads its parameters, with which
    ``verification.nodes.node_pairs`` pairs it (a layer a generated module calls twice, tied weights). TorchScript
    modules have no forward hooks: nothing is recorded.

    Examples:
        >>> with captured_module_outputs(model, ["conv1", "features.init_scale"]) as found:  # doctest: +SKIP
        ...     model(x)
        >>> found["conv1"].shape
    """
    import torch
    found, handles = {}, []
    named = dict(model.named_modules())
    hookable = not isinstance(model, torch.jit.ScriptModule)
    tensors = {*dict(model.named_parameters(remove_duplicate=False)),
               *dict(model.named_buffers(remove_duplicate=False))} if hookable else set()
    by_code = [name for name in dict.fromkeys(modules) if name in tensors and name not in named]
    with _statement_values(named, by_code, found) as read:
        for name in dict.fromkeys(modules) if hookable else ():
            path = name.rpartition(".")[0] if name in by_code else name
            if name not in read and path in named:
                handles.append(named[path].register_forward_hook(
                    lambda _m, _i, out, name=name: _keep_first(found, name, out)))
        try:
            yield found
        finally:
            for h in handles:
                h.remove()


def node_sites(model, keys) -> dict:
    """state_dict key -> where the output of the node reading that tensor is read: the path of the module holding it
    where that module is a layer (a forward of its own, no children, not the model itself: its forward output is the
    node's), else the key (the model's code reads the tensor: a generated module's function call on a Gluon block's
    tensor, a hand-written ``x * self.scale``); the path where no module holds it or the model is TorchScript
    (nothing is read then).

    Examples:
        >>> node_sites(model, ["features.0.weight", "features.init_scale"])  # doctest: +SKIP
        {'features.0.weight': 'features.0', 'features.init_scale': 'features.init_scale'}
    """
    import torch
    named = dict(model.named_modules())
    out = {}
    for key in keys:
        path = key.rpartition(".")[0]
        module = named.get(path)
        by_code = module is not None and not isinstance(model, torch.jit.ScriptModule) and (
            not path or next(module.children(), None) is not None or type(module).forward is torch.nn.Module.forward)
        out[key] = key if by_code else path
    return out


@contextlib.contextmanager
def _statement_values(named: dict, keys: list, found: dict):
    """Within the block, forwards store into ``found[key]`` the value of the first statement reading tensor ``key``
    (each module whose forward reads one runs an instrumented copy of it); yields the keys so read."""
    reads, plan = {}, {}  # module path -> the chains its forward's assignments read; path -> {key: chain}
    for key in keys:
        owner = key.rpartition(".")[0]
        for depth in range(owner.count(".") + 1 if owner else 0, -1, -1):
            path = ".".join(owner.split(".")[:depth])
            chain = key[len(path) + 1:] if path else key
            if path not in reads:
                parsed = _parsed_forward(named[path])
                reads[path] = set().union(*(c for _, _, c in _assignments(parsed[0].body))) if parsed else set()
            if chain in reads[path]:
                plan.setdefault(path, {})[key] = chain
                break
    patched = [path for path in plan if _instrument(named[path], plan[path], found)]
    try:
        yield {key for path in patched for key in plan[path]}
    finally:
        for path in patched:
            del named[path].__dict__["forward"]


def _parsed_forward(module):
    """(the FunctionDef of ``module``'s forward, with the file's line numbers; the function), or None where it cannot
    be recompiled as it is (no source, a closure or ``super()``, decorators, names its class mangles, a forward set on
    the instance)."""
    fn = type(module).forward
    if "forward" in vars(module) or not isinstance(fn, types.FunctionType) or fn.__code__.co_freevars:
        return None
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    func = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(func, ast.FunctionDef) or func.decorator_list or any(
            name.startswith("__") and not name.endswith("__") for node in ast.walk(func)
            for name in (getattr(node, "attr", ""), getattr(node, "id", ""))):
        return None
    ast.increment_lineno(func, first - 1)
    return func, fn


def _assignments(body: list):
    """(body, index, the ``self.`` chains its value reads) of each ``name = value`` statement, in the order they
    run (nested blocks' too; nested functions' not)."""
    for index, stmt in enumerate(body):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None and len(targets) == 1 and \
                isinstance(targets[0], ast.Name):
            yield body, index, {_chain(node) for node in ast.walk(stmt.value)} - {None}
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for inner in [getattr(stmt, f, None) for f in ("body", "orelse", "finalbody")] + [
                    h.body for h in getattr(stmt, "handlers", ())]:
                if isinstance(inner, list):
                    yield from _assignments(inner)


def _chain(node) -> str | None:
    """``self.features[3].scale`` -> ``features.3.scale`` (attributes and constant indices on ``self``), else None."""
    parts = []
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
        elif isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, (int, str)):
            parts.append(str(node.slice.value))
        else:
            return None
        node = node.value
    return ".".join(reversed(parts)) if parts and isinstance(node, ast.Name) and node.id == "self" else None


def _instrument(module, reads: dict, found: dict) -> bool:
    """Set on ``module`` a copy of its forward that stores ``found[key]`` after the first statement reading each of
    ``reads`` (key -> chain), compiled from the file's code (the same statements, line numbers and globals); False
    where it cannot be recompiled."""
    parsed = _parsed_forward(module)
    if parsed is None:
        return False
    func, fn = parsed
    first = {}
    for body, index, chains in _assignments(func.body):
        for key, chain in reads.items():
            if chain in chains:
                first.setdefault(key, (body, index))
    for key, (body, index) in sorted(first.items(), key=lambda item: -item[1][1]):
        stmt = body[index]
        name = (stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target).id
        body.insert(index + 1, ast.copy_location(ast.Expr(ast.Call(
            ast.Name("__migrate_keep__", ast.Load()), [ast.Constant(key), ast.Name(name, ast.Load())], [])), stmt))
    for arg in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs, func.args.vararg, func.args.kwarg]:
        if arg is not None:
            arg.annotation = None  # annotations may name what only type checkers import
    func.returns = None
    factory = ast.parse("def __migrate_factory__(__migrate_keep__):\n    pass\n")
    factory.body[0].body = [func, ast.Return(ast.Name(func.name, ast.Load()))]
    scope = {}
    exec(compile(ast.fix_missing_locations(factory), fn.__code__.co_filename, "exec"), fn.__globals__, scope)

    def keep(key, value):
        _keep_first(found, key, value)
    module.__dict__["forward"] = types.MethodType(scope["__migrate_factory__"](keep), module)
    return True


def _keep_first(found: dict, path: str, out) -> None:
    """``found[path]``: a copy of ``out``, unless the module ran before (a hook returns None: the output stays)."""
    if path not in found:
        found[path] = _detached(out)


def _detached(out):
    """A copy of a module output: an in-place op after the module (ReLU(inplace=True)) would change it."""
    return out.detach().clone() if hasattr(out, "detach") else out
