"""The exceptions migrate raises. Each names the object at fault, what was expected, and what to do.

Add new classes here (one per kind of failure), subclassing ``MigrateError`` and a builtin
(``ValueError``, ``KeyError`` or ``TypeError``) so callers can catch either. ``MXNetRequiredError`` (an
``ImportError``: what was asked needs MXNet, absent here) comes from ``mxformats.errors``, shared with gluon_lr.
``first_line`` puts a library's error into one of ours.
"""
from mxformats.errors import MXNetRequiredError  # noqa: F401 (re-exported)


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


class InputShapeError(MigrateError, ValueError):
    """An input shape or dtype is malformed, or a model rejects it (names the model and the shapes)."""


class ModelTypeError(MigrateError, TypeError):
    """A model argument is not of a supported type (names what was received and what is accepted)."""


class WeightShapeError(MigrateError, ValueError):
    """A weight does not have the shape its mapped target expects (names both sides and both shapes)."""


class MappingKeyError(MappingError, KeyError):
    """A name asked of a ``NameMapping`` is not in it (names it and where to look)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class CliUsageError(MigrateError, ValueError):
    """A command-line value is malformed (names the flag, what was expected and what was received)."""


class SettingsError(MigrateError, ValueError):
    """A settings document lacks a key migrate needs or holds a value of the wrong kind."""


class LrSchedulerError(SettingsError):
    """A settings document's lr_scheduler is one MXNet refuses or cannot compute (names the argument and the range)."""


class OutputPathError(MigrateError, ValueError):
    """An output path cannot be written: its folder is missing, not a folder, or not writable (names it and the fix)."""


class OutputExistsError(MigrateError, ValueError):
    """An output file exists and ``--force`` was not given (names the file and the flag)."""


class UnsupportedOpError(MigrateError, ValueError):
    """An MXNet graph node has no PyTorch translation (names the op, the node and the nearest known ops)."""


class InsufficientMemoryError(MigrateError, MemoryError):
    """The models do not fit in the memory available (names the bytes needed and the bytes available)."""


class OutputWriteError(MigrateError, OSError):
    """An output file could not be written (disk full, no permission); names the file and the bytes needed."""


class RecordIOError(MigrateError, ValueError):
    """A RecordIO ``.rec``/``.idx`` file is not what MXNet writes: wrong magic, a record cut short, an index offset
    past the end, a label count the record cannot hold, a payload that is no image (names the file and the byte offset).

    Attributes:
        path: The file at fault (None when the bytes came from no file).
        offset: The byte offset in it where the fault lies (None when it is not about one place).
    """

    def __init__(self, message: str, path=None, offset=None):
        super().__init__(message)
        self.path, self.offset = path, offset


class RecordKeyError(RecordIOError, KeyError):
    """A key asked of a ``RecordFile`` is not in its index (names the key, the file and the keys it holds)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class LabelsError(MigrateError, ValueError):
    """Labels given to ``migrate.check_training`` do not fit the models' output (names the shape, dtype or values
    expected and received)."""


class UnsupportedLossError(MigrateError, ValueError):
    """A loss ``migrate.check_training`` cannot run identically in MXNet and torch (names it and the ones it can)."""


class OutputMismatchError(MappingError):
    """The two models' outputs do not correspond in number or shape (names both sides)."""


class ArgumentError(MigrateError, ValueError):
    """An argument of a migrate function is malformed: a number out of range or not finite, a flag that is not a bool,
    a path that is no path, an object of another kind (names the argument, what was expected and what was received)."""


class ShardingError(MigrateError, ValueError):
    """A sharded (DTensor) model ``load_migration`` cannot load: parameters on several device meshes, a placement
    other than ``Shard``/``Replicate``, plain parameters beside sharded ones, a rank outside the mesh, a model wrapped
    in ``DistributedDataParallel`` (names the parameters and the fix)."""


class RankFailedError(MigrateError, RuntimeError):
    """``load_migration`` failed on another rank of the job; raised on every rank that did not fail itself, so that
    all ranks stop at the same call (names the rank and its error)."""


class DeviceCountWarning(UserWarning):
    """The torch job averages gradients over another number of ranks than the MXNet run had devices (the settings'
    ``num_devices``): layers that see the batch (BatchNorm) do not continue MXNet's run exactly."""


class StatesOrderWarning(UserWarning):
    """MXNet states that name no parameters (a stock ``gluon.Trainer``'s file saved before ``gluon_lr.export_settings``
    recorded its order, a Module's) were matched to the settings by index, assuming the settings' order."""


def first_line(exc: BaseException) -> str:
    """The message of a library's exception ``exc`` in one line, for one of ours: MXNet's C++ errors put a stack trace
    first and the message last.

    Examples:
        >>> first_line(ValueError("bad shape\\nmore detail"))
        'bad shape'
    """
    text = [line for line in str(exc).strip().splitlines() if line.strip()]
    if text and text[0].startswith("Traceback"):  # the message is the last line naming an error, or the last line
        text = [next((line for line in reversed(text) if "Error:" in line), text[-1])]
    return text[0][:300] if text else type(exc).__name__
