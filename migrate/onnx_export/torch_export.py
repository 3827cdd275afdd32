"""A torch module's ONNX export with parameter names kept (the torch side of matching; the graph translation that
stands in for MXNet without it).

``torch.onnx.export(dynamo=False, training=TRAINING, do_constant_folding=False)`` names the initializers by
``state_dict`` key (the default eval export folds BatchNorm into Conv and loses the names). Structure-only by
default: every parameter of more than one element is an initializer with its name, shape and dtype but no bytes
(``structure_only``), which is all that matching reads, so the export costs the same for a model of 1 MB or 10 GB and
never meets protobuf's 2 GB limit. The graph is then made static (``simplify``).
"""
from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np

from migrate.errors import ExportError, InputShapeError, ModelTypeError, first_line
from migrate.onnx_export.simplify import simplify_graph
from migrate.onnx_export.structure_only import shape_only_tensor

__all__ = ["export_torch"]


def export_torch(module, shapes, dtypes, *, with_weights=False, progress=None):
    """Return the ONNX ``ModelProto`` of a torch module, initializers named by ``state_dict`` key.

    Args:
        module: a ``torch.nn.Module``.
        shapes: one shape per input.
        dtypes: one numpy dtype per input (integer dtypes become ``torch.long``).
        with_weights: False (default): exported with ``export_params=False``, then the ``state_dict`` entries of
            more than one element become shape-only initializers (``shape_only_tensor``) and the others carry their
            values, as in a full export; True: every value.
        progress: optional callable ``progress(1)`` called after each module's forward during the trace.

    Returns:
        An ``onnx.ModelProto`` exported in training mode without constant folding, so that BatchNorm stays a
        node of its own. The module's training flag and its state (running statistics the training-mode trace
        updates) are restored afterwards.

    Raises:
        InputShapeError: the module rejects the inputs.
        ExportError: ``torch.onnx.export`` fails (names the op when torch does).

    Examples:
        >>> model = export_torch(torchvision.models.resnet18(), [(1, 3, 64, 64)], [np.float32])  # doctest: +SKIP
    """
    import onnx
    import torch
    if not isinstance(module, torch.nn.Module):
        raise ModelTypeError(f"torch_model: expected a torch.nn.Module, received {type(module).__name__}; "
                                   f"build the model first (e.g. torchvision.models.resnet18())")
    args = tuple(_torch_input(s, d) for s, d in zip(shapes, dtypes))
    was_training = module.training
    buf, failure = io.BytesIO(), None
    buffers = dict(module.named_buffers())  # a training-mode trace updates BatchNorm running statistics
    saved = {k: v.detach().clone() for k, v in buffers.items()}
    hookable = progress is not None and not isinstance(module, torch.jit.ScriptModule)  # TorchScript: no hooks
    def counted(*_):  # returns None: a forward hook's return value would replace the module's output
        progress(1)
    hooks = [m.register_forward_hook(counted) for m in module.modules()] if hookable else []
    try:
        with warnings.catch_warnings(), _shape_inference_without_values(not with_weights):
            warnings.simplefilter("ignore")
            torch.onnx.export(module, args, buf, dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False, export_params=with_weights)
    except Exception as exc:
        failure = exc
    finally:
        for hook in hooks:
            hook.remove()
        module.train(was_training)
        with torch.no_grad():
            for key, value in saved.items():
                buffers[key].copy_(value)
    if failure is not None:
        _check_torch_shapes(module, args, shapes)  # the model's own error first: shapes it does not take
        raise ExportError(f"torch ONNX export of {type(module).__name__} failed: {first_line(failure)}; if an "
                          f"op is unsupported, replace it or register a symbolic (torch.onnx."
                          f"register_custom_op_symbolic)") from None
    model = onnx.load_from_string(buf.getvalue())
    state = module.state_dict(keep_vars=True)
    if not with_weights:
        _state_as_initializers(model, state)
    simplify_graph(model, state)
    return model


@contextlib.contextmanager
def _shape_inference_without_values(active: bool):
    """Have torch's exporter infer shapes from the parameters' types, not their values: it otherwise serialises
    every weight into an ONNX proto for onnx's shape inference (268M parameters: 2.5 s and 0.7 GiB), even with
    ``export_params=False``. The parameters are typed graph inputs, so every shape is still inferred."""
    if not active:
        yield
        return
    import torch
    original = torch._C._jit_pass_onnx_graph_shape_type_inference
    torch._C._jit_pass_onnx_graph_shape_type_inference = lambda graph, params, opset: original(graph, {}, opset)
    try:
        yield
    finally:
        torch._C._jit_pass_onnx_graph_shape_type_inference = original


def _check_torch_shapes(module, args, shapes) -> None:
    """Run ``module`` in eval mode on ``args``: InputShapeError when it rejects them (called once an export failed:
    a successful export has run the model already)."""
    import torch
    was_training = module.training
    try:
        with torch.no_grad():
            module.eval()(*args)
    except Exception as exc:
        raise InputShapeError(f"torch model {type(module).__name__} rejected input shapes {shapes}: "
                              f"{first_line(exc)}; give the shapes the model accepts") from None
    finally:
        module.train(was_training)


def _state_as_initializers(model, state: dict):
    """Turn the graph inputs an ``export_params=False`` export makes of ``state`` into initializers, as a full
    export has them: shape-only above one element, with the value otherwise."""
    import onnx.numpy_helper
    import torch
    graph = model.graph
    moved = [i for i in graph.input if i.name in state]
    kept = [i for i in graph.input if i.name not in state]
    for value_info in moved:
        tensor = state[value_info.name].detach()
        if tensor.numel() <= 1 and tensor.dtype != torch.bfloat16:  # numpy has no bfloat16
            graph.initializer.append(onnx.numpy_helper.from_array(tensor.cpu().numpy(), value_info.name))
        else:
            graph.initializer.append(shape_only_tensor(value_info.name, value_info.type.tensor_type.elem_type,
                                                       tuple(tensor.shape)))
    del graph.input[:]
    graph.input.extend(kept)
    return model


def _torch_input(shape, dtype):
    import torch
    if np.issubdtype(dtype, np.integer):
        return torch.zeros(shape, dtype=torch.long)
    return torch.zeros(shape, dtype=torch.from_numpy(np.zeros(0, dtype)).dtype)
