"""The trainer states file: MXNet's optimizer states plus the multiplier table by parameter name.

Layout: the magic line ``GLUON-LR-STATES\\n``, an 8-byte big-endian length, a UTF-8 JSON header of that length
(format, schema_version, and per parameter in index order: name, shape, lr_mult, wd_mult), then the bytes MXNet's
``Trainer.save_states`` writes (a pickle of the updater's states and the optimizer).

States are matched to parameters BY NAME when loading, so a trainer whose parameters are ordered differently, or
that lacks some of them, still gets each parameter's own state.
"""
import io
import json
import os
import pickletools

from .atomic import atomic_write
from .errors import MXNetFileError, StatesFileError, UnsafeStatesError
from .optimizer_state import state_shape_problem
from .reading import read_regular_file
from .safe_pickle import safe_loads

__all__ = ["MAGIC", "write_states", "read_states", "states_bytes", "split_states", "unpickle_states"]

MAGIC = b"GLUON-LR-STATES\n"
_FORMAT = "gluon-lr-states"
_SCHEMA_VERSION = 1


def write_states(path, header_params: list, mx_states: bytes) -> None:
    """Write a states file atomically (temp file in the same folder, then ``os.replace``).

    Args:
        path: Destination.
        header_params: One dict per parameter in index order: name, shape, lr_mult, wd_mult.
        mx_states: The bytes of MXNet's own states file.

    Raises:
        StatesFileError: the folder is missing or not writable.

    Examples:
        >>> write_states("trainer.states", [{"name": "w", "shape": [2], "lr_mult": 0.1, "wd_mult": 1.0}], raw)
    """
    header = json.dumps({"format": _FORMAT, "schema_version": _SCHEMA_VERSION, "params": header_params}).encode()
    atomic_write(path, MAGIC + len(header).to_bytes(8, "big") + header + mx_states, error=StatesFileError)


def read_states(path) -> tuple:
    """Read a states file written by ``write_states``.

    Args:
        path: The file.

    Returns:
        ``(header_params, mx_states)``: the per-parameter header list and MXNet's states bytes.

    Raises:
        StatesFileError: the file is missing, not a gluon-lr states file (e.g. a stock ``Trainer.save_states``
            file), truncated, or of an unsupported version.

    Examples:
        >>> params, raw = read_states("trainer.states")
    """
    params, mx_states = split_states(states_bytes(path), str(path))
    if params is None:
        raise StatesFileError(f"File {str(path)!r} is not a gluon-lr states file (it does not start with {MAGIC!r}); "
                              f"a stock gluon.Trainer.save_states file holds no multipliers: load it with "
                              f"gluon.Trainer.load_states, or save it again with LrTrainer.save_states.")
    return params, mx_states


def states_bytes(source, error=StatesFileError) -> bytes:
    """The bytes of a states file: ``source`` is its path, or already its bytes.

    Raises:
        error: the file cannot be read, or ``source`` is neither a path nor bytes.

    Examples:
        >>> data = states_bytes("trainer.states")
    """
    if isinstance(source, (bytes, bytearray)):
        return bytes(source)
    if not isinstance(source, (str, os.PathLike)):
        raise error(f"States must be a path or bytes, got {type(source).__name__}; pass the file written by "
                    f"LrTrainer.save_states or gluon.Trainer.save_states.")
    return read_regular_file(source, error, "the states file LrTrainer.save_states or gluon.Trainer.save_states wrote")


def split_states(data: bytes, source: str, error=StatesFileError) -> tuple:
    """Split a states file's bytes into ``(header_params, mx_states)``; ``header_params`` is None for a stock file.

    Args:
        data: The whole file: ours (magic, header, MXNet's bytes) or a stock ``Trainer.save_states`` file.
        source: How messages name the file.
        error: The exception class raised for a corrupt or foreign-version header.

    Returns:
        The header's per-parameter list (name, shape, lr_mult, wd_mult and any freeze fields) or None, and the
        bytes MXNet wrote.

    Examples:
        >>> params, raw = split_states(open("trainer.states", "rb").read(), "trainer.states")
    """
    if not data.startswith(MAGIC):
        return None, data
    try:
        size = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "big")
        header = json.loads(data[len(MAGIC) + 8:len(MAGIC) + 8 + size].decode())
        params = [dict(p, name=str(p["name"]), shape=list(p["shape"]), lr_mult=float(p["lr_mult"]),
                       wd_mult=float(p["wd_mult"])) for p in header["params"]]  # other keys (freeze) pass through
    except RecursionError:
        raise error(f"States file {source!r} has a corrupt header (its JSON is nested too deeply to be one: "
                    f"gluon-lr writes a list of flat records); the file is damaged or crafted: save the states "
                    f"again.") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise error(f"States file {source!r} has a corrupt header ({type(exc).__name__}: {exc}); the "
                    f"file is damaged or truncated: save the states again.") from None
    if header.get("format") != _FORMAT or header.get("schema_version") != _SCHEMA_VERSION:
        raise error(f"States file {source!r} is {header.get('format')!r} version "
                    f"{header.get('schema_version')!r}; this gluon_lr reads {_FORMAT!r} version "
                    f"{_SCHEMA_VERSION}: save the states again with this version.")
    return params, data[len(MAGIC) + 8 + size:]


def _pickle_extent(data: bytes) -> str:
    """Where ``data`` stops reading as pickle opcodes (scanned by ``pickletools``, nothing run), in words: whole, cut
    short, or broken at a byte."""
    stream, last = io.BytesIO(data), None
    try:
        for last, _, _ in pickletools.genops(stream):
            pass
    except Exception:  # the opcode at the stream's position is cut short or unknown
        pass
    end = stream.tell()
    if last is not None and last.name == "STOP":
        return f"whole ({end} bytes of opcodes, ending with STOP) but builds no states"
    return f"cut short at byte {end}" if end >= len(data) else f"broken at byte {end} of {len(data)}"


def unpickle_states(mx_states: bytes, source: str, error=StatesFileError, as_data: bool = False) -> tuple:
    """``(states by index, optimizer or None)`` from the bytes MXNet's ``save_states`` wrote, unpickled safely.

    Only the classes such a file legitimately holds are admitted (``safe_pickle``): a file that names another
    callable is refused before anything in it runs.

    Args:
        mx_states: MXNet's bytes (a pickle of the states dict, or of ``(states, optimizer)``).
        source: How messages name the file.
        error: The exception class raised for corrupt or foreign bytes.
        as_data: True reads without MXNet: numpy arrays and ``safe_pickle.PickledObject`` s (the torch side);
            False gives MXNet's NDArrays and optimizer (the trainer's side).

    Examples:
        >>> states, optimizer = unpickle_states(raw, "trainer.states")
    """
    try:
        loaded = safe_loads(mx_states, source, as_data=as_data)
    except UnsafeStatesError as exc:
        if error is StatesFileError:
            raise
        raise error(str(exc)) from None
    except MXNetFileError as exc:
        raise error(f"States file {source!r}: {exc}") from None
    except Exception as exc:  # pickle raises many types on corrupt input
        raise error(f"States file {source!r}: the MXNet optimizer states are corrupt: they could not be unpickled "
                    f"({type(exc).__name__}: {str(exc)[:200]}); their pickle is {_pickle_extent(mx_states)}; save "
                    f"the states again.") from None
    states, optimizer = loaded if isinstance(loaded, tuple) and len(loaded) == 2 else (loaded, None)
    if not isinstance(states, dict):
        raise error(f"States file {source!r}: expected MXNet optimizer states (a dict index -> state), "
                    f"got {type(states).__name__}; save the states again with LrTrainer.save_states.")
    for index, state in states.items():
        problem = state_shape_problem(state)
        if problem:
            raise error(f"States file {source!r}: the state of parameter index {index!r} is not one MXNet makes "
                        f"({problem}: its optimizers make tuples of arrays); the file is damaged or crafted: save "
                        f"the states again.")
    return states, optimizer
