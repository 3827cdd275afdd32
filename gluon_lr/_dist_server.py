"""The part of gluon_lr that runs inside MXNet's kvstore servers (standard library only).

A server runs its loop while ``import mxnet`` is still in progress, so nothing here may import mxnet or gluon_lr.
Workers do not rely on servers having gluon_lr installed: ``gluon_lr._dist`` ships this file's source with each
command, and the server executes it once into a module of its own (see ``gluon_lr._dist._Boot``).

Every command returns the optimizer the server must keep using; the server's controller passes it to
``KVStore.set_optimizer``, which builds a new Updater around it. That Updater asks the optimizer for each key's state
on its first update: the wrapped ``create_state_multi_precision`` hands back the state created (or loaded) before,
so momentum, moments and update counts carry over exactly.
"""
import logging
import os
import pickle
import uuid

_LIVE = {}  # 'optimizer' -> the live optimizer, 'states' -> {key index: state}


def on_server(kind, *args):
    """Run one command from a worker; return the optimizer the server keeps using."""
    if kind == "install":
        optimizer, settings = args
        adopt(optimizer, {})
        apply_settings(optimizer, settings)
    elif kind == "update":
        optimizer = _LIVE["optimizer"]
        apply_settings(optimizer, args[0])
    elif kind == "save":
        optimizer = _LIVE["optimizer"]
        save_part(*args)
    elif kind == "load":
        optimizer = load(args[0])
    else:
        raise ValueError(f"gluon_lr server: unknown command {kind!r}; workers and servers run different versions")
    logging.info("gluon_lr: %s applied (%d optimizer states kept)", kind, len(_LIVE["states"]))
    return optimizer


def adopt(optimizer, states: dict) -> None:
    """Make `optimizer` the live one; its state factory hands back the states in `states` (filled as it goes)."""
    optimizer.__dict__.pop("create_state_multi_precision", None)
    original = type(optimizer).create_state_multi_precision

    def create_state_multi_precision(index, weight):
        if index not in states:
            states[index] = original(optimizer, index, weight)
        return states[index]

    optimizer.create_state_multi_precision = create_state_multi_precision
    _LIVE.update(optimizer=optimizer, states=states)


def apply_settings(optimizer, settings: dict) -> None:
    """Set learning rate (unless None: a schedule drives it), weight decay and the index-keyed multiplier tables."""
    if settings["lr"] is not None:
        optimizer.lr = settings["lr"]
    optimizer.wd = settings["wd"]
    optimizer.lr_mult = dict(settings["lr_mult"])
    optimizer.wd_mult = dict(settings["wd_mult"])


def pickled_states(optimizer, states: dict) -> bytes:
    """``pickle.dumps((states, optimizer))`` without the state hook: the bytes ``Updater.get_states(True)`` gives."""
    hook = optimizer.__dict__.pop("create_state_multi_precision", None)
    try:
        return pickle.dumps((states, optimizer))
    finally:
        if hook is not None:
            optimizer.create_state_multi_precision = hook


def save_part(directory: str, token: str) -> None:
    """Write this server's states and optimizer to ``directory/.{token}.<unique>.part`` (atomically)."""
    data = pickled_states(_LIVE["optimizer"], _LIVE["states"])
    part = os.path.join(directory, f".{token}.{os.getpid()}-{uuid.uuid4().hex}")
    with open(part, "wb") as fout:
        fout.write(data)
    os.replace(part, part + ".part")


def flat(state):
    """`state` with every array made 1-D: a server holds each key's weight as a flat array."""
    if isinstance(state, (tuple, list)):
        return type(state)(flat(s) for s in state)
    return state.reshape((-1,)) if hasattr(state, "reshape") and hasattr(state, "size") else state


def load(path: str):
    """Adopt the states (and the optimizer, when the file has one) of a states file; return the live optimizer."""
    with open(path, "rb") as fin:
        loaded = pickle.load(fin)
    if isinstance(loaded, tuple):
        states, optimizer = loaded
    else:
        states, optimizer = loaded, _LIVE["optimizer"]
    adopt(optimizer, {index: flat(state) for index, state in states.items()})
    return optimizer
