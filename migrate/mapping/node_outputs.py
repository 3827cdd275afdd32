"""The outputs of matched nodes: which MXNet op pairs with which torch module, running each side so that their
outputs are kept, and comparing two outputs. ``verify`` (eval mode) and ``migrate.check`` (a training step) read them.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import os

import numpy as np

from migrate.mapping.table import NameMapping

__all__ = ["captured_module_outputs", "max_diff", "mxnet_executor", "node_pairs", "packing_consumers",
           "seeded_inputs", "torch_inputs", "without_folded_bias"]


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


def node_pairs(source, mapping: NameMapping) -> list:
    """(MXNet op name, torch module path, folded bias or None) per matched node, in the mapping's canonical order.

    Examples:
        >>> node_pairs(source, mapping)[0]  # doctest: +SKIP
        ('resnetv10_conv0_fwd', 'conv1', None)
    """
    consumer = _mx_consumers(source.symbol)
    folded = {consumer.get(k): k for k in mapping if mapping.entry(k).get("fold")}
    seen, out = set(), []
    for name in mapping:
        e = mapping.entry(name)
        if e.get("fold") or consumer.get(name) is None:
            continue
        op, module = consumer[name], e["torch"].rsplit(".", 1)[0] if "." in e["torch"] else ""
        if (op, module) in seen:
            continue
        seen.add((op, module))
        out.append((op, module, folded.get(op)))
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
    """MXNet op name -> op type, for the ops that only repack parameters (gluon.rnn's blob, GluonNLP's q/k/v)."""
    return {n["name"]: n["op"] for n in json.loads(symbol.tojson())["nodes"] if n["op"] in _PACKING}


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
    it, removed when the block ends): yields the dict module path -> output (torch tensors, detached). A module that
    runs twice keeps its last output. TorchScript modules have no forward hooks: nothing is recorded.

    Examples:
        >>> with captured_module_outputs(model, ["conv1"]) as found:  # doctest: +SKIP
        ...     model(x)
        >>> found["conv1"].shape
    """
    import torch
    found, handles = {}, []
    named = dict(model.named_modules())
    hookable = not isinstance(model, torch.jit.ScriptModule)
    for path in dict.fromkeys(modules) if hookable else ():
        if path in named:
            handles.append(named[path].register_forward_hook(
                lambda _m, _i, out, path=path: found.__setitem__(path, _detached(out))))
    try:
        yield found
    finally:
        for h in handles:
            h.remove()


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
