"""The outputs of matched nodes: which MXNet op pairs with which torch module, running each side so that their
outputs are kept, and comparing two outputs. ``verify`` (eval mode) and ``migrate.check`` (a training step) read them.

A node's torch output is read where the model computes it: a layer's by a forward hook on it; a node computed by the
model's own code from a parameter (a generated module's function call on a Gluon block's tensor, ``x * self.scale``
in a hand-written forward) from the forward statement that reads the parameter. The model's file stays as it is:
for the forward call, the module runs a copy of its ``forward`` with the value of that statement kept after it.
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import itertools
import json
import os
import textwrap
import types

import numpy as np

from migrate.mapping.symbol_graph import symbol_document
from migrate.mapping.table import NameMapping

__all__ = ["captured_module_outputs", "max_diff", "mxnet_executor", "node_pairs", "node_sites", "packed_note",
           "packing_consumers", "seeded_inputs", "torch_inputs", "without_folded_bias"]


def seeded_inputs(shapes, dtypes, mapping: NameMapping, seed: int) -> list:
    """Seeded numpy inputs: standard normal floats; integers in ``[0, rows of the smallest embedding)`` (10 without
    one), so token ids index every embedding of the model.

    Examples:
        >>> [x.shape for x in seeded_inputs([(2, 3)], [np.dtype("float32")], mapping, seed=0)]  # doctest: +SKIP
        [(2, 3)]
    """
    rng = np.random.default_rng(seed)
    vocab = [mapping.entry(k)["mx_shape"][0] for k in mapping if mapping.entry(k).get("kind") == "embed"]
    high = min(vocab) if vocab else 10
    return [rng.integers(0, high, size=s).astype(d) if np.issubdtype(d, np.integer)
            else rng.standard_normal(s).astype(d) for s, d in zip(shapes, dtypes)]


def torch_inputs(inputs: list) -> list:
    """The numpy inputs as torch tensors (integers as int64, what embeddings take), sharing memory where they can."""
    import torch
    return [torch.from_numpy(x).long() if np.issubdtype(x.dtype, np.integer) else torch.from_numpy(x)
            for x in inputs]


def node_pairs(source, mapping: NameMapping, model=None) -> list:
    """(MXNet op name, torch module path, folded bias or None) per matched node, in the mapping's canonical order.

    With the torch ``model``, a node whose parameter is read by the model's code rather than a layer is named by the
    parameter's key instead of a module path (``node_sites``): ``captured_module_outputs`` reads its output there.

    Examples:
        >>> node_pairs(source, mapping)[0]  # doctest: +SKIP
        ('resnetv10_conv0_fwd', 'conv1', None)
    """
    consumer = _mx_consumers(source.symbol)
    folded = {consumer.get(k): k for k in mapping if mapping.entry(k).get("fold")}
    sites = node_sites(model, [mapping.entry(k)["torch"] for k in mapping]) if model is not None else {}
    seen, out = set(), []
    for name in mapping:
        e = mapping.entry(name)
        if e.get("fold") or consumer.get(name) is None:
            continue
        op, module = consumer[name], e["torch"].rsplit(".", 1)[0] if "." in e["torch"] else ""
        if (op, module) in seen:
            continue
        seen.add((op, module))
        out.append((op, sites.get(e["torch"], module), folded.get(op)))
    return out


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


def _mx_consumers(symbol) -> dict:
    """MXNet parameter name -> name of the op that consumes it."""
    nodes = json.loads(symbol.tojson())["nodes"]
    out = {}
    for n in nodes:
        if n["op"] != "null":
            for src, *_ in n["inputs"]:
                if nodes[src]["op"] == "null":
                    out.setdefault(nodes[src]["name"], n["name"])
    return out


_PACKING = frozenset({"Reshape", "reshape", "_rnn_param_concat", "Concat", "concat", "stack", "expand_dims",
                      "transpose", "SliceChannel", "split"})


def packing_consumers(symbol) -> dict:
    """MXNet op name -> op type, for the ops that only repack parameters (gluon.rnn's blob, GluonNLP's q/k/v); the
    symbol read with or without MXNet."""
    return {n["name"]: n["op"] for n in symbol_document(symbol)["nodes"] if n["op"] in _PACKING}


def packed_note(op: str) -> str:
    """The note of a node not compared because MXNet packs its tensor with others through op type ``op``."""
    return f"skipped: MXNet packs the tensor with others through {op} (checked at the final output)"


def mxnet_executor(symbol, values: dict, ops, *, with_final=True, grad_req="null", args_grad=None) -> tuple:
    """An MXNet executor whose outputs are the outputs of ``ops`` (those the graph has), then the final outputs.

    Args:
        symbol: the model's output symbol.
        values: name -> ``mx.nd.NDArray`` for every argument and auxiliary state (inputs included); the executor
            reads and writes these arrays themselves.
        ops: op names whose ``<op>_output`` to expose.
        with_final: expose the final outputs too (always, when none of ``ops`` is found).
        grad_req: MXNet's ``grad_req`` (a string or a dict name -> string).
        args_grad: name -> gradient array, for a backward pass.

    Returns:
        ``(executor, the ops exposed)``: the first ``len(ops exposed)`` outputs are theirs.

    Examples:
        >>> executor, exposed = mxnet_executor(source.symbol, values, ["conv0_fwd"])  # doctest: +SKIP
    """
    import mxnet as mx
    internals = symbol.get_internals()
    available = set(internals.list_outputs())
    wanted = [op for op in dict.fromkeys(ops) if f"{op}_output" in available]
    finals = list(symbol) if with_final or not wanted else []
    group = mx.sym.Group([internals[f"{op}_output"] for op in wanted] + finals)
    saved = os.environ.get("MXNET_SUBGRAPH_BACKEND")
    os.environ["MXNET_SUBGRAPH_BACKEND"] = "NONE"  # the MKLDNN subgraph pass breaks binding internal outputs
    try:
        executor = group.bind(mx.cpu(), args={k: values[k] for k in group.list_arguments()}, args_grad=args_grad,
                              aux_states={k: values[k] for k in group.list_auxiliary_states()}, grad_req=grad_req)
    finally:
        if saved is None:
            del os.environ["MXNET_SUBGRAPH_BACKEND"]
        else:
            os.environ["MXNET_SUBGRAPH_BACKEND"] = saved
    return executor, wanted


@contextlib.contextmanager
def captured_module_outputs(model, modules):
    """Within the block, every forward of ``model`` records a copy of each named module's output (a forward hook on
    it, removed when the block ends): yields the dict module path -> output (torch tensors, detached). A name that is
    a parameter or buffer key (``node_sites``) records the value of the first forward statement that reads that
    tensor (``x = data * self.features.init_scale``), in the forward of the module holding it or of the nearest one
    above it whose code reads it; where none does, the output of the module holding it. A module that runs twice
    keeps its last output. TorchScript modules have no forward hooks: nothing is recorded.

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
                    lambda _m, _i, out, name=name: found.__setitem__(name, _detached(out))))
        try:
            yield found
        finally:
            for h in handles:
                h.remove()


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
        found[key] = _detached(value)
    module.__dict__["forward"] = types.MethodType(scope["__migrate_factory__"](keep), module)
    return True


def _detached(out):
    """A copy of a module output: an in-place op after the module (ReLU(inplace=True)) would change it."""
    return out.detach().clone() if hasattr(out, "detach") else out


def max_diff(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(largest absolute difference, largest ``|a|``) of two outputs; ``b`` is read in ``a``'s shape (reshaped, or
    the closest axis permutation: GluonNLP's encoder runs time-major where HF runs batch-major); ``inf`` when the
    sizes differ.

    Examples:
        >>> max_diff(np.ones((2, 3)), np.ones((3, 2)).T)
        (0.0, 1.0)
    """
    if a.shape != b.shape:
        if a.size != b.size:
            return float("inf"), 0.0
        return min(max_diff(a, c) for c in _layouts(b, a.shape))
    scale = float(np.max(np.abs(a))) if a.size else 0.0
    return float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0, scale


def _layouts(b: np.ndarray, shape: tuple) -> list:
    """``b`` read in ``shape``: reshaped, and as each axis permutation with that shape."""
    out = [b.reshape(shape)]
    if b.ndim == len(shape) and b.ndim <= 4:
        out += [b.transpose(p) for p in itertools.permutations(range(b.ndim))
                if tuple(b.shape[k] for k in p) == tuple(shape) and p != tuple(range(b.ndim))]
    return out


def without_folded_bias(output, bias):
    """The output of an MXNet conv whose bias was folded into the next BatchNorm, without that bias (as is when
    there is none)."""
    if output is None or bias is None:
        return output
    b = bias.asnumpy() if hasattr(bias, "asnumpy") else np.asarray(bias)
    return output - b.reshape((1, -1) + (1,) * (output.ndim - 2))
