"""The exceptions migrate raises. Each names the object at fault, what was expected, and what to do.

Add new classes here (one per kind of failure), subclassing ``MigrateError`` and a builtin
(``ValueError``, ``KeyError`` or ``TypeError``) so callers can catch either.
"""


class MigrateError(Exception):
    """Base class of every error raised by migrate."""


class InputFileError(MigrateError, ValueError):
    """A file given to migrate is missing, unreadable, or not what it claims to be."""


class ExportError(MigrateError, ValueError):
    """A model could not be exported to ONNX (names the op and what to do)."""


class MappingError(MigrateError, ValueError):
    """The two models could not be matched, or a mapping file is invalid."""


class UnsupportedOptimizerError(MigrateError, ValueError):
    """An MXNet optimizer or setting has no translation to torch (names it and the alternatives)."""


class StateConversionError(MigrateError, ValueError):
    """MXNet optimizer states do not fit the torch optimizer or model (names the parameter)."""


class SettingsError(MigrateError, ValueError):
    """A settings document lacks a key migrate needs or holds a value of the wrong kind."""
