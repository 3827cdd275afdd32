"""Copy MXNet parameter values into a torch ``state_dict`` by a ``NameMapping``."""
from __future__ import annotations

import os

import numpy as np

from migrate.errors import InputFileError, MappingError, WeightShapeError
from migrate.mapping.table import NameMapping

__all__ = ["convert_weights"]


def convert_weights(mx_params, mapping: NameMapping, torch_model=None) -> dict:
    """Return a torch ``state_dict`` holding the MXNet values, each under its mapped key and in torch's layout.

    Args:
        mx_params: dict name -> ``mx.nd.NDArray`` or ``np.ndarray``, or the path of a ``.params`` file
            (``arg:``/``aux:`` prefixes are removed).
        mapping: the ``NameMapping`` from ``name_mapping``.
        torch_model: optional; when given, tensors take its dtypes, shapes are checked against its
            ``state_dict``, and keys in ``mapping.torch_defaults`` are filled (zero bias, counters kept).

    Returns:
        dict torch key -> ``torch.Tensor``; load it with ``torch_model.load_state_dict(sd, strict=False)`` or,
        with ``torch_model`` given and ``mapping.ok``, strictly.

    Raises:
        InputFileError: the params file is missing or not an MXNet params file.
        MappingError: MXNet parameters named by the mapping are missing from ``mx_params`` (lists them).
        WeightShapeError: a value does not fit its torch target (names both sides and both shapes).

    Note:
        An MXNet conv bias with no torch bias is folded into the next BatchNorm's running mean
        (``mean - bias``): exact in eval mode; under batch statistics the bias cancels anyway.

    Example:
        >>> sd = convert_weights("net-0000.params", mapping, torch_net)  # doctest: +SKIP
        >>> torch_net.load_state_dict(sd)
    """
    import torch
    values = _read_params(mx_params)
    missing = [k for k in mapping if k not in values]
    if missing:
        raise MappingError(f"mx_params: the mapping needs {len(missing)} MXNet parameter(s) not given: "
                           f"{missing[:8]}{' ...' if len(missing) > 8 else ''}; pass the params of the model "
                           f"the mapping was built from")
    target = torch_model.state_dict() if torch_model is not None else {}
    out: dict = {}
    order = sorted(mapping, key=lambda k: mapping.entry(k).get("fold", False))
    for name in order:
        key = mapping[name]
        array = mapping.to_torch(name, _numpy(values[name]))
        if key in target and tuple(target[key].shape) != array.shape:
            raise WeightShapeError(f"MXNet {name!r} {tuple(values[name].shape)} -> torch {key!r}: expected "
                                   f"{tuple(target[key].shape)}, received {array.shape}; the torch model does "
                                   f"not match the mapping (rebuild it with the same arguments)")
        tensor = torch.from_numpy(np.array(array))
        out[key] = out[key] + tensor if key in out else tensor
    for key in mapping.torch_defaults:
        if key in target:
            out[key] = target[key].clone() if "num_batches_tracked" in key else torch.zeros_like(target[key])
    return {k: v.to(target[k].dtype) if k in target else v for k, v in out.items()}


def _read_params(mx_params) -> dict:
    if isinstance(mx_params, (str, os.PathLike)):
        import mxnet as mx
        path = os.fspath(mx_params)
        if not os.path.isfile(path):
            raise InputFileError(f"MXNet params file {path!r}: not found; give the .params file the model was "
                                 f"saved to")
        try:
            raw = mx.nd.load(path)
        except Exception as exc:
            reason = str(exc).splitlines()[0][:200]
            raise InputFileError(f"MXNet params file {path!r}: expected an NDArray dict written by mx.nd.save "
                                 f"or HybridBlock.export, could not read it ({reason})") from None
        if not isinstance(raw, dict):
            raise InputFileError(f"MXNet params file {path!r}: expected named arrays, received a list of "
                                 f"{len(raw)}; save a dict name -> NDArray")
        mx_params = raw
    if not isinstance(mx_params, dict):
        raise MappingError(f"mx_params: expected a dict name -> array or a .params path, received "
                           f"{type(mx_params).__name__}; pass "
                           f"{{p.name: p.data() for p in net.collect_params().values()}}")
    return {k.split(":", 1)[1] if k.startswith(("arg:", "aux:")) else k: v for k, v in mx_params.items()}


def _numpy(value) -> np.ndarray:
    return value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)
