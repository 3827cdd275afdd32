"""MXNet trainer states as both state conversions read them: the file, its parameter names, and each state array as a
torch tensor for its parameter.

``state_conversion`` (into migrate's exact optimizers) and ``stock_state`` (into stock ``torch.optim`` optimizers)
share these steps; the optimizer records' ``extra_state`` converters use ``StateTargets`` and ``state_tensor``.
"""
import os
from typing import Mapping, NamedTuple

import numpy as np
import torch

from mxformats.states import split_states, states_bytes, unpickle_states
from migrate.errors import InputFileError, StateConversionError

__all__ = ["StateTargets", "check_state_names", "load_states", "mx_name_of", "param_targets", "state_tensor"]


class StateTargets(NamedTuple):
    """Where MXNet's states go: the settings' parameter indices, the torch parameters and the name mapping.

    Attributes:
        by_index: MXNet parameter index (the states' key) -> MXNet parameter name, from the settings.
        params: MXNet parameter name -> torch parameter, from the optimizer's groups (``param_targets``).
        mapping: MXNet parameter name -> torch state_dict key (its ``to_torch`` converts layouts).
    """

    by_index: dict
    params: dict
    mapping: Mapping


def load_states(mx_states):
    """(parameter names or None, states by index, pickled MXNet optimizer or None) from a path or bytes.

    Raises:
        InputFileError: the file cannot be read or unpickled.

    Example:
        >>> names, states, mx_optimizer = load_states("trainer.states")  # doctest: +SKIP
    """
    source = os.fspath(mx_states) if isinstance(mx_states, (str, os.PathLike)) else "mx_states"
    data = states_bytes(mx_states, error=InputFileError)
    names, mx_states = split_states(data, source, error=InputFileError)
    states, optimizer = unpickle_states(mx_states, source, error=InputFileError, as_data=True)
    return (None if names is None else [param["name"] for param in names]), states, optimizer


def check_state_names(header_names, by_index) -> None:
    """StateConversionError unless the states file's parameter names (LrTrainer files) match the settings'.

    Args:
        header_names: The names the states file holds (None: a ``gluon.Trainer`` file, which holds none).
        by_index: MXNet parameter index -> name, from the settings.
    """
    if header_names is None:
        return
    wrong = [f"{i}: {name!r} in the states, {by_index.get(i)!r} in the settings"
             for i, name in enumerate(header_names) if by_index.get(i) != name]
    if wrong:
        raise StateConversionError(f"the states file names other parameters than the settings ({wrong[:5]}); these "
                                   f"states belong to another model: pass the settings exported with them")


def param_targets(optimizer) -> dict:
    """MXNet name -> torch parameter, from the ``mx_names`` of the optimizer's groups.

    Raises:
        StateConversionError: no group names its MXNet parameters.
    """
    targets = {}
    for group in optimizer.param_groups:
        targets.update(zip(group.get("mx_names", ()), group["params"]))
    if not targets:
        raise StateConversionError(f"optimizer {type(optimizer).__name__} has no groups with mx_names; build it "
                                   f"with migrate.torch_optimizer so its groups name their MXNet parameters")
    return targets


def mx_name_of(index, by_index, settings) -> str:
    """The MXNet parameter name of states index ``index``.

    Raises:
        StateConversionError: the settings have no parameter with that index.
    """
    if index not in by_index:
        raise StateConversionError(f"MXNet states hold parameter index {index!r} but the settings have indices "
                                   f"0..{len(settings['params']) - 1}; these states belong to another model")
    return by_index[index]


def state_tensor(mapping, mx_name, array, param, shape=None, dtype=None):
    """``array`` in torch layout as a tensor like ``param`` (of ``shape``, when given, and then taken as it is; in
    ``dtype`` when given).

    Raises:
        StateConversionError: its shape does not fit.

    Example:
        >>> state_tensor({"w": "w"}, "w", np.zeros((2, 3)), torch.zeros(2, 3)).shape
        torch.Size([2, 3])
    """
    convert = getattr(mapping, "to_torch", None) if shape is None else None
    array = convert(mx_name, array) if convert is not None else array
    expected = tuple(param.shape) if shape is None else tuple(shape)
    if tuple(array.shape) != expected:
        raise StateConversionError(f"MXNet state of {mx_name!r} has shape {tuple(array.shape)} but its torch "
                                   f"parameter needs {expected}; these states belong to another model")
    return torch.as_tensor(np.ascontiguousarray(array), dtype=dtype or param.dtype, device=param.device).clone()
