"""mxformats: the files both halves of gluon-lr read and write, and MXNet's own, with neither MXNet nor torch.

One module each: ``settings`` (the settings file: schema, reader, validator, writer), ``states`` (the trainer states
file: header and MXNet's pickled optimizer states), ``safe_pickle`` (unpickling those states without running code
from the file: as live MXNet objects, or as plain data where MXNet is absent), ``pickle_limits`` (the bounds such a
pickle is held to: nesting and allocations), ``optimizer_state`` (the structure of one optimizer state), ``ndarray``
(MXNet's NDArray serialization and ``.params`` files, decoded to numpy), ``symbol`` (MXNet's symbol JSON, read into a
plain graph), ``atomic`` (the one atomic writer of the project), ``reading`` (opening input files), ``validate`` (the
checks of numbers and flags both halves share) and ``errors``.

``gluon_lr`` (the MXNet side) writes these files; ``migrate`` (the torch side) reads them where MXNet cannot be
installed (numpy 2, Python 3.12+).

Examples:
    >>> import mxformats
    >>> settings = mxformats.load_settings("out/settings.json")  # doctest: +SKIP
    >>> from mxformats.states import read_states, unpickle_states
    >>> header, raw = read_states("out/trainer.states")  # doctest: +SKIP
    >>> states, optimizer = unpickle_states(raw, "out/trainer.states", as_data=True)  # doctest: +SKIP
"""
from mxformats.errors import (HyperparameterError, LrTrainerError, MultiplierError, MXNetRequiredError,
                              ParamsTypeError, SettingsFileError, StatesFileError, UnsafeStatesError)
from mxformats.settings import as_settings, check_settings, load_settings, write_settings

__all__ = [
    "load_settings", "check_settings", "as_settings", "write_settings",
    "LrTrainerError", "MultiplierError", "ParamsTypeError", "HyperparameterError", "SettingsFileError",
    "StatesFileError", "UnsafeStatesError", "MXNetRequiredError",
]
