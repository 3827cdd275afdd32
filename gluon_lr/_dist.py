"""Make multipliers, learning-rate changes and saved states hold on MXNet's distributed kvstore servers.

With ``kvstore='dist_sync'``/``'dist_async'`` and ``update_on_kvstore=True`` the optimizer runs on the servers. Gluon
pickles it there once, WITHOUT ``param_dict``: every ``Parameter.lr_mult``/``wd_mult`` is ignored on the servers,
later changes (``set_learning_rate``, a new multiplier) never arrive, and ``save_states``/``load_states`` fail
("Cannot save states for distributed training"). Re-sending the optimizer makes each server build a new Updater
and lose its states (momentum, moments, update counts).

The mechanism here: a server unpickles whatever a worker sends through ``KVStore._send_command_to_servers`` and
hands the result to ``set_optimizer`` (``mxnet/kvstore/kvstore_server.py``). A worker therefore sends a
:class:`_Command` whose unpickling runs a function of this module ON THE SERVER: it changes the server's live
optimizer in place (index-keyed ``lr_mult``/``wd_mult`` tables, ``lr``, ``wd``) and returns that same object. The
live optimizer's ``create_state_multi_precision`` is wrapped so that it hands back the state it created before;
the new Updater that ``set_optimizer`` builds thus takes over every old state object and continues exactly.

Freezing needs nothing on the servers: ``grad_req='null'`` stops the push of that key, so the server neither
updates the weight nor touches its state or update count; unfreezing resumes the push.

Servers must be able to import ``gluon_lr`` (same version as the workers). Server-side failures cannot travel back
to the worker: they are printed to the server's stderr (``ModuleNotFoundError: No module named 'gluon_lr'``, ...).
"""
import glob
import logging
import os
import pickle
import tempfile
import uuid
import weakref

from mxnet.kvstore.kvstore import KVStore, _get_kvstore_server_command_type

__all__ = []

_LIVE = {}  # server process only: 'optimizer' -> the live optimizer, 'states' -> {index: state}
_BIGARRAY_BOUND = 1000000  # MXNet's default MXNET_KVSTORE_BIGARRAY_BOUND: larger arrays are sliced over servers


class DistributedError(ValueError):
    """A distributed-kvstore operation of gluon_lr cannot be carried out as asked."""


# --------------------------------------------------------------------------------------------- worker side
def server_updates(trainer) -> bool:
    """Return whether `trainer` updates its weights on distributed kvstore servers."""
    kv = trainer._kvstore
    return bool(kv is not None and trainer._update_on_kvstore and "dist" in kv.type)


def attach(trainer) -> None:
    """Install the trainer's optimizer and multiplier table on the servers; call right after ``_init_kvstore``.

    Does nothing unless the trainer updates on distributed kvstore servers. Makes the trainer's kvstore save and
    load the servers' optimizer states (so ``Trainer.save_states``/``load_states`` work under ``dist_*``).
    """
    if not server_updates(trainer):
        return
    kv = trainer._kvstore
    kv.__class__ = _ServerStatesKVStore
    kv._gluon_lr_trainer = weakref.ref(trainer)
    kv._updater = _WorkerView(trainer._optimizer)
    settings = _settings(trainer)
    _send(kv, _Command("install", trainer._optimizer, settings))
    kv._gluon_lr_sent = settings


def sync(trainer) -> None:
    """Send learning rate, weight decay and multiplier tables to the servers if they changed since last sent.

    Call before every push (cheap when nothing changed). Does nothing unless the trainer updates on servers.
    """
    kv = trainer._kvstore
    if not isinstance(kv, _ServerStatesKVStore):
        return
    settings = _settings(trainer)
    if settings != kv._gluon_lr_sent:
        _send(kv, _Command("update", settings))
        kv._gluon_lr_sent = settings


def _settings(trainer) -> dict:
    optimizer = trainer._optimizer
    return {
        "lr": None if optimizer.lr_scheduler is not None else float(optimizer.lr),
        "wd": float(optimizer.wd),
        "lr_mult": {i: float(p.lr_mult) for i, p in enumerate(trainer._params)},
        "wd_mult": {i: float(p.wd_mult) for i, p in enumerate(trainer._params)},
    }


def _send(kv, command) -> None:
    body = pickle.dumps(command, 0).decode("ascii")  # protocol 0 is ASCII, as KVStore.set_optimizer sends it
    kv._send_command_to_servers(_get_kvstore_server_command_type("kController"), body)


class _WorkerView:
    """What ``Trainer.load_states`` reads as ``kvstore._updater.optimizer`` on a worker."""

    def __init__(self, optimizer):
        self.optimizer = optimizer


class _ServerStatesKVStore(KVStore):
    """A worker's dist KVStore whose optimizer states live on (and are saved from) the servers."""

    def save_optimizer_states(self, fname, dump_optimizer=False):
        """Gather the servers' states into `fname` (written atomically); same bytes as ``Updater.get_states``."""
        trainer = self._gluon_lr_trainer()
        if trainer is not None:
            sync(trainer)
        directory = os.path.dirname(os.path.abspath(fname))
        token = uuid.uuid4().hex
        try:
            _send(self, _Command("save", directory, token))
            states, optimizer = _merge_parts(sorted(glob.glob(os.path.join(directory, f".{token}.*.part"))), fname)
        finally:
            for part in glob.glob(os.path.join(directory, f".{token}.*")):
                os.remove(part)
        _write_atomic(fname, pickle.dumps((states, optimizer) if dump_optimizer else states))

    def load_optimizer_states(self, fname):
        """Load the states (and optimizer, when saved with it) in `fname` into every server."""
        path = os.path.abspath(fname)
        try:
            with open(path, "rb") as fin:
                loaded = pickle.load(fin)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as err:
            raise DistributedError(f"States file '{fname}' could not be read for the kvstore servers: {err!r}. "
                                   f"Pass a file written by Trainer.save_states.") from None
        _check_loadable(loaded, fname)
        _send(self, _Command("load", path))
        if isinstance(loaded, tuple):
            self._updater = _WorkerView(loaded[1])
        self._gluon_lr_sent = None  # the next sync re-sends the trainer's table and learning rate


def _expected_servers() -> int:
    return int(os.environ.get("DMLC_NUM_SERVER", "1"))


def _check_loadable(loaded, fname) -> None:
    states = loaded[0] if isinstance(loaded, tuple) else loaded
    if not isinstance(states, dict):
        raise DistributedError(f"States file '{fname}' holds a {type(states).__name__}, expected the dict of "
                               f"optimizer states that Trainer.save_states writes. Pass such a file.")
    if _expected_servers() > 1:
        big = [i for i, s in states.items() if any(a.size >= _bound() for a in _arrays(s))]
        if big:
            raise DistributedError(f"States of keys {big} are at least MXNET_KVSTORE_BIGARRAY_BOUND={_bound()} "
                                   f"elements, which MXNet slices over the {_expected_servers()} servers; "
                                   f"loading them is not supported. Raise MXNET_KVSTORE_BIGARRAY_BOUND above "
                                   f"the largest parameter size on every process, or use one server.")


def _bound() -> int:
    return int(os.environ.get("MXNET_KVSTORE_BIGARRAY_BOUND", _BIGARRAY_BOUND))


def _arrays(state) -> list:
    if isinstance(state, (tuple, list)):
        return [a for s in state for a in _arrays(s)]
    return [] if state is None or not hasattr(state, "size") else [state]


def _merge_parts(parts: list, fname) -> tuple:
    if len(parts) != _expected_servers():
        raise DistributedError(f"Saving '{fname}': {len(parts)} of {_expected_servers()} kvstore servers wrote "
                               f"their states to {os.path.dirname(os.path.abspath(fname))}. The folder must be "
                               f"writable by every server (a shared filesystem across machines), and servers "
                               f"must import gluon_lr; see the servers' stderr.")
    states, optimizers = {}, []
    for part in parts:
        with open(part, "rb") as fin:
            part_states, optimizer = pickle.load(fin)
        clash = sorted(set(states) & set(part_states))
        if clash:
            raise DistributedError(f"Saving '{fname}': keys {clash} are sliced over several servers (parameters "
                                   f"of at least MXNET_KVSTORE_BIGARRAY_BOUND={_bound()} elements). Raise "
                                   f"MXNET_KVSTORE_BIGARRAY_BOUND above the largest parameter size on every "
                                   f"process, or use one server.")
        states.update(part_states)
        optimizers.append(optimizer)
    return states, _merge_optimizers(optimizers)


def _merge_optimizers(optimizers: list):
    merged = optimizers[0]
    counts = {}
    for optimizer in optimizers:
        for device, table in optimizer._all_index_update_counts.items():
            counts.setdefault(device, {}).update(table)
    merged._all_index_update_counts = counts
    merged._index_update_count = counts.setdefault(0, {})
    merged.num_update = max(o.num_update for o in optimizers)
    return merged


def _write_atomic(path, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".states")
    try:
        with os.fdopen(fd, "wb") as fout:
            fout.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


# --------------------------------------------------------------------------------------------- server side
class _Command:
    """A worker-side message; unpickling it on a server runs ``_on_server(kind, *args)`` there."""

    def __init__(self, kind: str, *args):
        self.kind, self.args = kind, args

    def __reduce__(self):
        return _on_server, (self.kind,) + tuple(self.args)


def _on_server(kind, *args):
    """Run on a server while it unpickles a :class:`_Command`; returns the optimizer the server keeps using."""
    if kind == "install":
        optimizer, settings = args
        _adopt(optimizer, {})
        _apply(optimizer, settings)
    elif kind == "update":
        optimizer = _LIVE["optimizer"]
        _apply(optimizer, args[0])
    elif kind == "save":
        optimizer = _LIVE["optimizer"]
        _save_part(*args)
    elif kind == "load":
        optimizer = _load(args[0])
    else:
        raise ValueError(f"gluon_lr: unknown server command {kind!r}; workers and servers run different versions")
    logging.info("gluon_lr: %s applied (%d states kept)", kind, len(_LIVE["states"]))
    return optimizer


def _adopt(optimizer, states: dict) -> None:
    """Make `optimizer` the live one; its state factory hands back states it (or a loaded file) created."""
    original = type(optimizer).create_state_multi_precision

    def create_state_multi_precision(index, weight):
        if index not in states:
            states[index] = original(optimizer, index, weight)
        return states[index]

    optimizer.create_state_multi_precision = create_state_multi_precision
    _LIVE.update(optimizer=optimizer, states=states)


def _apply(optimizer, settings: dict) -> None:
    if settings["lr"] is not None:
        optimizer.lr = settings["lr"]
    optimizer.wd = settings["wd"]
    optimizer.lr_mult = dict(settings["lr_mult"])
    optimizer.wd_mult = dict(settings["wd_mult"])


def _save_part(directory: str, token: str) -> None:
    optimizer = _LIVE["optimizer"]
    hook = optimizer.__dict__.pop("create_state_multi_precision")
    try:
        data = pickle.dumps((_LIVE["states"], optimizer))
    finally:
        optimizer.create_state_multi_precision = hook
    part = os.path.join(directory, f".{token}.{os.getpid()}-{uuid.uuid4().hex}")
    with open(part, "wb") as fout:
        fout.write(data)
    os.replace(part, part + ".part")


def _load(path: str):
    with open(path, "rb") as fin:
        loaded = pickle.load(fin)
    if isinstance(loaded, tuple):
        states, optimizer = loaded
    else:
        states, optimizer = loaded, _LIVE["optimizer"]
        optimizer.__dict__.pop("create_state_multi_precision", None)
    _adopt(optimizer, states)
    return optimizer
