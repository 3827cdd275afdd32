"""The structure of an MXNet optimizer state: None, an array, or nested tuples/lists of arrays (and scalars)."""

__all__ = ["state_arrays"]


def state_arrays(state) -> list:
    """Every array in one parameter's optimizer state, depth first (MXNet's order); None and scalars are skipped.

    Arrays are NDArrays, or numpy arrays where a state was read back from a file.

    Example:
        >>> mean, var = mx.nd.zeros(3), mx.nd.ones(3)
        >>> [a.shape for a in state_arrays((mean, (var, None), 0.5))]
        [(3,), (3,)]
    """
    if isinstance(state, (tuple, list)):
        return [array for item in state for array in state_arrays(item)]
    return [state] if hasattr(state, "shape") and hasattr(state, "size") else []
