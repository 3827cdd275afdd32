"""``LrTrainer.save_states``/``load_states``: MXNet's optimizer states with the multiplier table and freezing, by name.

The file format (magic, JSON header, MXNet's bytes) lives in ``mxformats.states``, which needs no MXNet; this module
is the trainer's side: it takes the states from the updater (or the kvstore), and loads a file back into a trainer,
remapping the states by parameter name.
"""
import contextlib
import os
import pickle
import shutil
import tempfile
import warnings

from mxnet.gluon.trainer import Trainer as _GluonTrainer

from mxformats.atomic import remove_stale, temp_prefix
from mxformats.optimizer_state import state_arrays
from mxformats.states import read_states, unpickle_states, write_states
from mxformats.validate import check_multiplier

from .errors import MultiplierError, StatesFileError

__all__ = ["remap_states", "save_trainer_states", "load_trainer_states"]

#: MXNet's own Trainer, taken at import: code that swaps ``mx.gluon.Trainer`` for ``LrTrainer`` (to run an existing
#: script with it) would otherwise send ``gluon.Trainer.save_states(trainer, ...)`` back into ``LrTrainer.save_states``.
STOCK_TRAINER = _GluonTrainer


def remap_states(path, states: dict, optimizer, old_names: list, new_params: list) -> bytes:
    """Re-key MXNet's index-keyed optimizer states from the file's parameter order to the trainer's, by name.

    States of names the trainer lacks are dropped; update counts (Adam's bias correction) follow their parameter.

    Args:
        path: The states file (named in errors).
        states, optimizer: What ``unpickle_states`` read from the file.
        old_names: Parameter names in the file's index order.
        new_params: The trainer's Parameters in its index order.

    Returns:
        MXNet states bytes keyed by the trainer's indices.

    Raises:
        StatesFileError: a state's shape does not fit the parameter of the same name.

    Examples:
        >>> raw = remap_states(path, states, optimizer, [p["name"] for p in header], trainer._params)
    """
    new_index = {param.name: i for i, param in enumerate(new_params)}
    moved = {}
    for old, state in states.items():
        name = old_names[old] if isinstance(old, int) and 0 <= old < len(old_names) else None
        if name not in new_index:
            continue
        param = new_params[new_index[name]]
        bad = [arr.shape for arr in state_arrays(state) if param.shape and arr.shape != tuple(param.shape)]
        if bad:
            raise StatesFileError(f"States file {str(path)!r}: the state of {name!r} has shape {bad[0]}, the "
                                  f"parameter has {tuple(param.shape)}; the model changed: load matching states.")
        moved[new_index[name]] = state
    if optimizer is not None:
        counts = getattr(optimizer, "_all_index_update_counts", {})
        for device, table in counts.items():
            counts[device] = {new_index[old_names[i]]: n for i, n in table.items()
                              if isinstance(i, int) and i < len(old_names) and old_names[i] in new_index}
        optimizer._index_update_count = counts.get(0, {})
    return pickle.dumps((moved, optimizer) if optimizer is not None else moved)


def save_trainer_states(trainer, fname) -> None:
    """``LrTrainer.save_states``: MXNet's states of ``trainer`` plus its table and freezing, by name, atomically.

    Without a kvstore that updates, the bytes come straight from the updater (what ``Trainer.save_states`` writes);
    a kvstore that updates writes its file first, into a temporary folder beside ``fname`` whose name carries this
    process's id (a later save, load or write in that folder removes it if the process was killed).

    Examples:
        >>> save_trainer_states(trainer, "trainer.states")
    """
    if not trainer._kv_initialized:
        trainer._init_kvstore()
    if trainer._params_to_init:
        trainer._init_params()
    if trainer._update_on_kvstore:
        with _scratch_folder(os.path.dirname(os.path.abspath(fname)), StatesFileError) as tmp:
            raw_path = os.path.join(tmp, "mx.states")
            STOCK_TRAINER.save_states(trainer, raw_path)
            with open(raw_path, "rb") as source:
                raw = source.read()
    else:
        raw = trainer._updaters[0].get_states(dump_optimizer=True)
    freeze = trainer._freezer.records()
    header = [{"name": r["name"], "shape": r["shape"], "lr_mult": r["lr_mult"], "wd_mult": r["wd_mult"],
               **freeze[r["name"]]} for r in trainer._param_records()]
    write_states(fname, header, raw)


def load_trainer_states(trainer, fname) -> list:
    """``LrTrainer.load_states``: the whole file is checked against ``trainer`` first, then applied.

    Checked before anything changes: the header (names, shapes, multipliers, freeze fields, masks), the pickle
    (only the classes states hold), the optimizer's type, every state's shape. A file that fails leaves the trainer
    exactly as it was. The folder of ``fname`` may be read-only.

    Returns:
        The names in the file that ``trainer`` does not have (a warning lists them too).

    Raises:
        StatesFileError: the file does not fit (the message names what and where); ``UnsafeStatesError`` for a
            pickle that names another class.

    Examples:
        >>> missing = load_trainer_states(trainer, "trainer.states")
    """
    header, raw = read_states(fname)
    _check_header(str(fname), header)
    _check_names_shared(str(fname), header, trainer)
    trainer._freezer.check_records(header, str(fname))
    states, optimizer = unpickle_states(raw, str(fname))
    _check_optimizer(str(fname), optimizer, trainer._optimizer)
    old_names = [p["name"] for p in header]
    raw = remap_states(fname, states, optimizer, old_names, trainer._params)
    restored = {field: {p["name"]: p[field] for p in header if p["name"] in trainer._table
                        and p[field] != getattr(trainer._table[p["name"]], field)}
                for field in ("lr_mult", "wd_mult")}
    folder = os.path.dirname(os.path.abspath(fname))  # dist kvstore servers read the file from there
    with _scratch_folder(folder if os.access(folder, os.W_OK) else tempfile.gettempdir(), StatesFileError) as tmp:
        raw_path = os.path.join(tmp, "mx.states")
        with open(raw_path, "wb") as out:
            out.write(raw)
        STOCK_TRAINER.load_states(trainer, raw_path)
    trainer._cap_aggregation()
    for field, values in restored.items():
        trainer._set_explicit(field, values, replace=False, source="load_states")
    trainer._apply_table()
    with trainer._grad_req_watch():
        trainer._freezer.load_records(header)
    missing = [name for name in old_names if name not in trainer._table]
    if missing:
        warnings.warn(f"load_states({str(fname)!r}): {len(missing)} parameter(s) in the file are not in this "
                      f"trainer and were skipped: {missing[:10]}")
    return missing


def _check_header(source: str, header: list) -> None:
    """Every header record's multipliers are valid and every name appears once (before anything is applied)."""
    seen = set()
    for record in header:
        if record["name"] in seen:
            raise StatesFileError(f"States file {source!r} names parameter {record['name']!r} twice; the file is "
                                  f"damaged: save the states again.")
        seen.add(record["name"])
        for field in ("lr_mult", "wd_mult"):
            try:
                check_multiplier(record[field], f"{record['name']!r}.{field}")
            except MultiplierError as exc:
                raise StatesFileError(f"States file {source!r}: {exc}") from None


def _check_names_shared(source: str, header: list, trainer) -> None:
    """The file lists parameters, and at least one of them is the trainer's (else loading would wipe every state
    the trainer holds and move its update count, keeping nothing)."""
    if not header:
        raise StatesFileError(f"States file {source!r} lists no parameter; the file is damaged or was saved by a "
                              f"trainer without parameters: load the states saved with this model.")
    if not any(record["name"] in trainer._table for record in header):
        theirs, ours = [r["name"] for r in header[:3]], list(trainer._table)[:3]
        raise StatesFileError(f"States file {source!r} holds none of this trainer's {len(trainer._table)} parameters "
                              f"(the file has {theirs}..., this trainer {ours}...); it belongs to another model (or "
                              f"the same model under another name prefix): load the states saved with this model.")


def _check_optimizer(source: str, saved, current) -> None:
    """The file's optimizer (when it holds one) is of the trainer's optimizer class."""
    if saved is not None and type(saved) is not type(current):
        raise StatesFileError(f"States file {source!r} holds {type(saved).__name__} states, this trainer runs "
                              f"{type(current).__name__}; load a file saved with {type(current).__name__}, or build "
                              f"the trainer with {type(saved).__name__} to resume that run.")


@contextlib.contextmanager
def _scratch_folder(folder: str, error):
    """A temporary folder in ``folder`` named with this process's id; leftovers of killed processes go first."""
    remove_stale(folder)
    try:
        path = tempfile.mkdtemp(prefix=temp_prefix("gluon-lr"), dir=folder)
    except OSError as exc:
        raise error(f"Cannot write in folder {folder!r} ({exc.strerror}); choose a writable folder.") from None
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
