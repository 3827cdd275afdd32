"""The structure of an MXNet optimizer state (None, an array, or nested tuples/lists of arrays and scalars), and the
parameter names by index that gluon_lr records on an MXNet optimizer (``PARAM_NAMES``)."""

__all__ = ["state_arrays", "PARAM_NAMES", "record_param_names", "recorded_param_names"]


def state_arrays(state) -> list:
    """Every array in one parameter's optimizer state, depth first (MXNet's order); None and scalars are skipped.

    Arrays are NDArrays, or numpy arrays where a state was read back from a file.

    Examples:
        >>> mean, var = mx.nd.zeros(3), mx.nd.ones(3)
        >>> [a.shape for a in state_arrays((mean, (var, None), 0.5))]
        [(3,), (3,)]
    """
    if isinstance(state, (tuple, list)):
        return [array for item in state for array in state_arrays(item)]
    return [state] if hasattr(state, "shape") and hasattr(state, "size") else []


#: The attribute gluon_lr sets on an MXNet optimizer: the parameter names by index, in the updater's order (set by
#: ``LrTrainer`` and by ``gluon_lr.export_settings`` of a stock Trainer). MXNet's ``save_states`` pickles the
#: optimizer with its attributes, so a stock Trainer's states file then says which parameter each index is, and
#: migrate can compare that order with the settings'. Not ``idx2name``: MXNet's LARS reads that and updates otherwise.
PARAM_NAMES = "_gluon_lr_param_names"


def record_param_names(optimizer, names) -> None:
    """Store ``names`` (by index) on an MXNet optimizer as ``PARAM_NAMES``.

    Examples:
        >>> record_param_names(trainer._optimizer, [p.name for p in trainer._params])  # doctest: +SKIP
    """
    setattr(optimizer, PARAM_NAMES, [str(name) for name in names])


def recorded_param_names(optimizer):
    """The parameter names by index an optimizer (live, or read from a states file as data) carries, or None when it
    carries none (a stock Trainer never exported, a Module) or carries something else.

    Examples:
        >>> recorded_param_names(optimizer)  # doctest: +SKIP
        ['dense0_weight', 'dense0_bias']
    """
    names = getattr(optimizer, PARAM_NAMES, None) if optimizer is not None else None
    if isinstance(names, list) and all(isinstance(name, str) for name in names):
        return list(names)
    return None
