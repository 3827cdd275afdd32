"""MXNet trainer states as both state conversions read them: the file, its parameter names, and each state array as a
torch tensor for its parameter.

``state_conversion`` (into migrate's exact optimizers) and ``stock_state`` (into stock ``torch.optim`` optimizers)
share these steps; the optimizer records' ``extra_state`` converters use ``StateTargets`` and ``state_tensor``.
"""
import os
import warnings
from typing import Mapping, NamedTuple

import numpy as np
import torch

from mxformats.optimizer_state import recorded_param_names
from mxformats.states import split_states, states_bytes, unpickle_states
from migrate.errors import InputFileError, StateConversionError, StatesOrderWarning

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

    Examples:
        >>> names, states, mx_optimizer = load_states("trainer.states")  # doctest: +SKIP
    """
    source = os.fspath(mx_states) if isinstance(mx_states, (str, os.PathLike)) else "mx_states"
    data = states_bytes(mx_states, error=InputFileError)
    names, mx_states = split_states(data, source, error=InputFileError)
    states, optimizer = unpickle_states(mx_states, source, error=InputFileError, as_data=True)
    return (None if names is None else [param["name"] for param in names]), states, optimizer


def check_state_names(header_names, by_index, mx_optimizer=None) -> None:
    """StateConversionError unless the parameter order the states carry is the settings' (a trainer built on another
    parameter order would give equal-shaped tensors each other's state); a ``StatesOrderWarning`` when they carry none.

    The order comes from LrTrainer's header, else from the names gluon_lr recorded on the pickled optimizer
    (``mxformats.optimizer_state.PARAM_NAMES``: a stock Trainer's file saved after ``gluon_lr.export_settings``).
    A stock Trainer's file without them is matched by index, assuming the settings' order, and warned about; a
    Module's file (no optimizer: its order is the symbol's, as the settings') passes silently.

    Args:
        header_names: The names LrTrainer's header holds, or None (a ``gluon.Trainer`` or Module file).
        by_index: MXNet parameter index -> name, from the settings.
        mx_optimizer: The optimizer pickled in the file (live or read as data), or None.

    Examples:
        >>> check_state_names(["w", "b"], {0: "w", 1: "b"})
    """
    names = header_names if header_names is not None else recorded_param_names(mx_optimizer)
    if names is None:
        if mx_optimizer is not None:
            warnings.warn(StatesOrderWarning(
                "the MXNet states name no parameters (a stock gluon.Trainer's file saved before "
                "gluon_lr.export_settings(trainer) recorded its order): they were matched by index, assuming the "
                "settings' order; export the settings before save_states to have the order checked"), stacklevel=3)
        return
    wrong = [(i, name, by_index.get(i)) for i, name in enumerate(names) if by_index.get(i) != name]
    if wrong and sorted(names) == sorted(by_index.values()):
        moved = [f"index {i}: {name!r} in the states, {theirs!r} in the settings" for i, name, theirs in wrong[:5]]
        raise StateConversionError(f"the states were saved by a trainer built on another parameter order than the "
                                   f"settings' ({len(wrong)} of {len(names)} indices differ: {moved}); converted by "
                                   f"index, equal-shaped tensors would get each other's state: pass the settings "
                                   f"exported from the trainer that saved these states")
    if wrong:
        listed = [f"{i}: {name!r} in the states, {theirs!r} in the settings" for i, name, theirs in wrong[:5]]
        raise StateConversionError(f"the states file names other parameters than the settings ({listed}); these "
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

    Examples:
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
