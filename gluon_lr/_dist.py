"""Make multipliers, learning-rate changes and saved states hold on MXNet's distributed kvstore servers.

With ``kvstore='dist_sync'``/``'dist_async'`` and ``update_on_kvstore=True`` the optimizer runs on the servers. Gluon
pickles it there once, WITHOUT ``param_dict``: every ``Parameter.lr_mult``/``wd_mult`` is ignored on the servers,
later changes (``set_learning_rate``, a new multiplier) never arrive, and ``save_states``/``load_states`` fail
("Cannot save states for distributed training"). Re-sending the optimizer makes each server build a new Updater
and lose its states (momentum, moments, update counts).

The mechanism here: a server unpickles whatever a worker sends through ``KVStore._send_command_to_servers`` and
hands the result to ``set_optimizer`` (``mxnet/kvstore/kvstore_server.py``). A worker therefore sends a
:class:`_Command` whose unpickling runs ``_dist_server.on_server`` ON THE SERVER: it changes the server's live
optimizer in place (index-keyed ``lr_mult``/``wd_mult`` tables, ``lr``, ``wd``) and returns that same object. The
live optimizer's ``create_state_multi_precision`` is wrapped so that it hands back the state it created before;
the new Updater that ``set_optimizer`` builds thus takes over every old state object and continues exactly.
The server code travels as source with each command (a server runs inside ``import mxnet``, where importing
gluon_lr would be circular), so servers need no gluon_lr installed.

Freezing needs nothing on the servers: ``grad_req='null'`` stops the push of that key, so the server neither
updates the weight nor touches its state or update count; unfreezing resumes the push.

Server-side failures cannot travel back to the worker: they are printed to the server's stderr; a failed save is
detected on the worker (a server's part file is missing).
"""
import glob
import hashlib
import os
import pickle
import uuid
import weakref
from pathlib import Path

import numpy as np
from mxnet.kvstore.kvstore import KVStore, _get_kvstore_server_command_type

from .errors import DistributedError, MaskError, StatesFileError, UnsafeStatesError
from mxformats.atomic import atomic_write
from mxformats.reading import read_regular_file
from mxformats.safe_pickle import safe_loads
from mxformats.optimizer_state import state_arrays

__all__ = []

_SERVER_SOURCE = Path(__file__).with_name("_dist_server.py").read_text(encoding="ascii")
_SERVER_MODULE = "_gluon_lr_dist_server_" + hashlib.sha1(_SERVER_SOURCE.encode()).hexdigest()[:12]
# Evaluated on a server: execute the shipped source into a module once, and return its ``on_server``.
_BOOT = ("(lambda sys: sys.modules[name].on_server if name in sys.modules else (lambda m: (exec(compile(source, "
         "name, 'exec'), m.__dict__), sys.modules.__setitem__(name, m), m.on_server)[2])"
         "(__import__('types').ModuleType(name)))(__import__('sys'))")
_BIGARRAY_BOUND = 1000000  # MXNet's default MXNET_KVSTORE_BIGARRAY_BOUND: larger arrays are sliced over servers


# --------------------------------------------------------------------------------------------- worker side
def server_updates(trainer) -> bool:
    """Return whether `trainer` updates its weights on distributed kvstore servers."""
    kv = trainer._kvstore
    return bool(kv is not None and trainer._update_on_kvstore and "dist" in kv.type)


def refuse_masks(kvstore_params: dict) -> None:
    """Raise MaskError when the trainer's kvstore updates on dist servers, where element masks cannot apply."""
    kvstore = kvstore_params["kvstore"]
    kv_type = kvstore if isinstance(kvstore, str) else getattr(kvstore, "type", "")
    if "dist" in str(kv_type) and kvstore_params["update_on_kvstore"] is not False:
        raise MaskError(f"element masks cannot apply on dist kvstore servers (kvstore {kv_type!r} updates "
                        f"there); build the trainer with update_on_kvstore=False to mask elements.")


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
    """Before a push on a dist kvstore: wait for pending initial pulls, then send learning rate, weight decay and
    multiplier tables to the servers if they changed since last sent (only when the servers update).

    Call before every push (cheap when nothing changed). Does nothing unless the kvstore is distributed.
    """
    kv = trainer._kvstore
    if kv is None or "dist" not in kv.type:
        return
    _wait_for_initial_pulls(trainer)
    if not isinstance(kv, _ServerStatesKVStore):
        return
    settings = _settings(trainer)
    if settings != kv._gluon_lr_sent:
        _send(kv, _Command("update", settings))
        kv._gluon_lr_sent = settings


def _wait_for_initial_pulls(trainer) -> None:
    """Wait until every initialised weight has arrived from the kvstore before this step's gradients are pushed.

    Gluon initialises the kvstore lazily in the first ``step``, after that step's backward: it pushes each initial
    weight and pulls it back, asynchronously. Nothing orders that pull before the push of the gradient of the same
    key; under dist_sync with ``update_on_kvstore=False`` the server then stores the summed gradient, and a pull
    that arrives late returns it AS THE WEIGHT (measured: workers then disagree by ~1 after step 1, at random).
    Waits only when parameters were newly initialised (first step, deferred initialisation).
    """
    pending = set(map(id, trainer._params_to_init))
    ready = [p for p in trainer._params if id(p) not in pending and p._data is not None]
    kv = trainer._kvstore
    if len(ready) == getattr(kv, "_gluon_lr_ready", -1):
        return  # nothing newly initialised since the last wait
    for param in ready:
        for data in param._data:
            data.wait_to_read()
    kv._gluon_lr_ready = len(ready)


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


class _Boot:
    """Unpickles, on a server, to ``on_server`` of ``_dist_server.py`` (shipped as source: see that module)."""

    def __reduce__(self):
        return eval, (_BOOT, {"name": _SERVER_MODULE, "source": _SERVER_SOURCE})

    def __call__(self, kind: str, *args):
        """Run the command in this process (what a server does after unpickling)."""
        from . import _dist_server
        return _dist_server.on_server(kind, *args)


class _Command:
    """A message to the servers; unpickling it there runs ``_dist_server.on_server(kind, *args)``."""

    def __init__(self, kind: str, *args):
        self.kind, self.args = kind, args

    def __reduce__(self):
        return _Boot(), (self.kind,) + tuple(self.args)


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
            if trainer is not None:  # servers hold every array flat; give states their parameters' shapes
                states = {i: _shaped(s, trainer._params[i].shape) if i < len(trainer._params) else s
                          for i, s in states.items()}
        finally:
            for part in glob.glob(os.path.join(directory, f".{token}.*")):
                os.remove(part)
        atomic_write(fname, pickle.dumps((states, optimizer) if dump_optimizer else states), error=StatesFileError)

    def load_optimizer_states(self, fname):
        """Load the states (and optimizer, when saved with it) in `fname` into every server."""
        path = os.path.abspath(fname)
        try:
            loaded = safe_loads(read_regular_file(path, StatesFileError, "a file written by Trainer.save_states"),
                                str(fname))
        except UnsafeStatesError:
            raise
        except (StatesFileError, pickle.UnpicklingError, EOFError, ValueError, TypeError) as err:
            raise StatesFileError(f"States file '{fname}' could not be read for the kvstore servers: {err!r}. "
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
        raise StatesFileError(f"States file '{fname}' holds a {type(states).__name__}, expected the dict of "
                               f"optimizer states that Trainer.save_states writes. Pass such a file.")
    if _expected_servers() > 1:
        big = [i for i, s in states.items() if any(a.size >= _bound() for a in state_arrays(s))]
        if big:
            raise DistributedError(f"States of keys {big} are at least MXNET_KVSTORE_BIGARRAY_BOUND={_bound()} "
                                   f"elements, which MXNet slices over the {_expected_servers()} servers; "
                                   f"loading them is not supported. Raise MXNET_KVSTORE_BIGARRAY_BOUND above "
                                   f"the largest parameter size on every process, or use one server.")


def _bound() -> int:
    return int(os.environ.get("MXNET_KVSTORE_BIGARRAY_BOUND", _BIGARRAY_BOUND))




def _shaped(state, shape: tuple):
    """`state` with every array of the parameter's size reshaped to the parameter's `shape`."""
    if isinstance(state, (tuple, list)):
        return type(state)(_shaped(s, shape) for s in state)
    size = int(np.prod(shape))
    return state.reshape(shape) if hasattr(state, "reshape") and getattr(state, "size", -1) == size else state


def _merge_parts(parts: list, fname) -> tuple:
    if len(parts) != _expected_servers():
        raise DistributedError(f"Saving '{fname}': {len(parts)} of {_expected_servers()} kvstore servers wrote "
                               f"their states to {os.path.dirname(os.path.abspath(fname))}. The folder must be "
                               f"writable by every server (a shared filesystem across machines); see the "
                               f"servers' stderr.")
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


