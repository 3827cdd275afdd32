"""The structure of an MXNet optimizer state (None, an array, or nested tuples/lists of arrays and scalars), and the
parameter names by index that gluon_lr records on an MXNet optimizer (``PARAM_NAMES``)."""

__all__ = ["state_arrays", "state_shape_problem", "MAX_STATE_DEPTH", "PARAM_NAMES", "record_param_names",
           "recorded_param_names"]

#: How deep MXNet's optimizer states nest: a multi_precision state ``(weight32, (mean, var))`` is 2 deep; a state
#: nested deeper was not made by MXNet.
MAX_STATE_DEPTH = 8


def _walk(state):
    """``(item, depth, again)`` for ``state`` and everything in its tuples and lists, depth first, iteratively; a
    container met a second time (``again``) is not walked again, so a crafted state that shares its lists stays
    linear (2**40 paths through 40 shared lists are 80 steps)."""
    seen, todo = set(), [(state, 0)]
    while todo:
        item, depth = todo.pop()
        container = isinstance(item, (tuple, list)) and len(item) > 0  # () is one object in CPython: not shared
        again = container and id(item) in seen
        yield item, depth, again
        if container and not again:
            seen.add(id(item))
            todo.extend((child, depth + 1) for child in reversed(item))


def state_arrays(state) -> list:
    """Every array in one parameter's optimizer state, depth first (MXNet's order); None and scalars are skipped.

    Arrays are NDArrays, or numpy arrays where a state was read back from a file. A list or tuple met twice is read
    once (MXNet never shares them: ``state_shape_problem`` names such a state).

    Examples:
        >>> mean, var = mx.nd.zeros(3), mx.nd.ones(3)
        >>> [a.shape for a in state_arrays((mean, (var, None), 0.5))]
        [(3,), (3,)]
    """
    return [item for item, _, again in _walk(state)
            if not again and not isinstance(item, (tuple, list)) and hasattr(item, "shape") and hasattr(item, "size")]


def state_shape_problem(state) -> str:
    """What makes ``state`` something MXNet's optimizers never make, or ``""``: its tuples and lists must form a tree
    (none met twice) at most ``MAX_STATE_DEPTH`` deep. Linear in the state's size whatever it holds.

    Examples:
        >>> shared = [mx.nd.zeros(3)]
        >>> state_shape_problem((shared, shared))
        'it holds the same list at two places'
    """
    for item, depth, again in _walk(state):
        if again:
            return f"it holds the same {type(item).__name__} at two places"
        if depth > MAX_STATE_DEPTH:
            return f"it nests more than {MAX_STATE_DEPTH} deep"
    return ""


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
