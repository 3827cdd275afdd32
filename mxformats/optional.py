"""Importing MXNet where it may be absent: one typed error (``MXNetRequiredError``) instead of an ImportError from
deep inside, or MXNet's own failure on numpy 2 (``np.bool``)."""
import importlib

from .errors import MXNetRequiredError

__all__ = ["import_mxnet"]


def import_mxnet(what: str):
    """The ``mxnet`` module, for ``what`` (named in the error when MXNet cannot be imported).

    Raises:
        MXNetRequiredError: MXNet is not installed, or its import fails (numpy 2, Python 3.12+); the message names
            ``what``, the cause and the install command.

    Examples:
        >>> mx = import_mxnet("migrate.name_mapping (exporting the Gluon block)")  # doctest: +SKIP
    """
    try:
        return importlib.import_module("mxnet")
    except Exception as exc:  # ImportError, or mxnet 1.9.1's AttributeError on numpy 2
        raise MXNetRequiredError.for_(what, exc) from None
