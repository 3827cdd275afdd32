"""A torch module run on numpy inputs with the outputs of some of its modules kept: what ``verify`` and
``check_training`` read of a torch model, and of the graph's translation where it stands in for MXNet
(``migrate.source.translated``). The hooks are put on from outside: nothing of this lives in the model.

Examples:
    >>> with captured_module_outputs(model, ["conv1"]) as found:  # doctest: +SKIP
    ...     model(*torch_inputs([x]))
    >>> found["conv1"].shape  # doctest: +SKIP
    torch.Size([1, 64, 16, 16])
"""
from __future__ import annotations

import contextlib

import numpy as np

__all__ = ["captured_module_outputs", "torch_inputs"]


def torch_inputs(inputs: list) -> list:
    """The numpy inputs as torch tensors (integers as int64, what embeddings take), sharing memory where they can."""
    import torch
    return [torch.from_numpy(x).long() if np.issubdtype(x.dtype, np.integer) else torch.from_numpy(x)
            for x in inputs]


@contextlib.contextmanager
def captured_module_outputs(model, modules):
    """Within the block, every forward of ``model`` records a copy of each named module's output (a forward hook on
    it, removed when the block ends): yields the dict module path -> output (torch tensors, detached). A module that
    runs twice keeps its first output: the call of the op that first reads its parameters, with which
    ``verification.nodes.node_pairs`` pairs it (a layer a generated module calls twice, tied weights). TorchScript
    modules have no forward hooks: nothing is recorded.

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
                lambda _m, _i, out, path=path: _keep_first(found, path, out)))
    try:
        yield found
    finally:
        for h in handles:
            h.remove()


def _keep_first(found: dict, path: str, out) -> None:
    """``found[path]``: a copy of ``out``, unless the module ran before (a hook returns None: the output stays)."""
    if path not in found:
        found[path] = _detached(out)


def _detached(out):
    """A copy of a module output: an in-place op after the module (ReLU(inplace=True)) would change it."""
    return out.detach().clone() if hasattr(out, "detach") else out
