"""Reading the settings document (README "Settings file format") on the migrate side."""
import os

from migrate.errors import SettingsError

_REQUIRED = {"optimizer": dict, "params": dict, "num_update": int}
_REQUIRED_OPTIMIZER = {"name": str, "wd": (int, float), "rescale_grad": (int, float), "hyperparameters": dict}
_REQUIRED_PARAM = {"index": int, "lr_mult": (int, float), "wd_mult": (int, float), "frozen": bool}


def as_settings(settings):
    """The settings dict: ``settings`` itself, or the file at that path loaded by ``gluon_lr.load_settings``."""
    if isinstance(settings, (str, os.PathLike)):
        from gluon_lr import load_settings
        settings = load_settings(settings)
    if not isinstance(settings, dict):
        raise SettingsError(f"settings must be a dict or a path to a settings file, got {type(settings).__name__}; "
                            f"pass the document LrTrainer.export_settings wrote")
    _check_keys("settings", settings, _REQUIRED)
    _check_keys("settings['optimizer']", settings["optimizer"], _REQUIRED_OPTIMIZER)
    for name, entry in settings["params"].items():
        _check_keys(f"settings['params'][{name!r}]", entry, _REQUIRED_PARAM)
    return settings


def _check_keys(where, document, required):
    """Raise SettingsError naming every key of ``required`` missing from ``document`` or of the wrong type."""
    if not isinstance(document, dict):
        raise SettingsError(f"{where} must be a JSON object, got {type(document).__name__}; "
                            f"re-export the settings with LrTrainer.export_settings")
    missing = [key for key in required if key not in document]
    wrong = [f"{key} ({type(document[key]).__name__})" for key, kind in required.items()
             if key in document and (not isinstance(document[key], kind) or isinstance(document[key], bool)
                                     and kind is not bool)]
    if missing or wrong:
        raise SettingsError(f"{where} is missing keys {missing} or has values of the wrong type {wrong}; "
                            f"expected {sorted(required)}; re-export the settings with LrTrainer.export_settings")
