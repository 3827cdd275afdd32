"""torch.optim param groups that carry the per-parameter lr, weight decay and freezing of a gluon-lr settings file."""
import warnings

from mxformats.settings import as_settings
from migrate import arguments
from migrate.errors import MappingError, SettingsError

_DEFAULT_LR = {"sgd": 0.01, "nag": 0.01, "adam": 0.001, "rmsprop": 0.001, "adagrad": 0.01, "adadelta": 0.01,
               "adamax": 0.002, "nadam": 0.001, "lamb": 0.001, "signum": 0.01, "ftrl": 0.1}
_UNMAPPED = ("error", "freeze", "default")


class ParamGroups(list):
    """The param groups (a list, ready for any ``torch.optim`` optimizer; frozen parameters sit in groups with
    ``frozen=True``) and ``frozen``, the torch parameter names to hold still: frozen in the settings, or unmapped with
    ``unmapped="freeze"``. ``param_groups`` leaves the
    model alone; ``apply_frozen(model)`` sets ``requires_grad=False`` on them (``torch_optimizer`` does).

    Examples:
        >>> groups = param_groups(model, "settings.json", mapping)
        >>> groups.apply_frozen(model)
        >>> torch.optim.SGD(groups, lr=0.1)
    """

    def __init__(self, groups: list, frozen: list):
        super().__init__(groups)
        self.frozen = frozen

    def apply_frozen(self, torch_model) -> None:
        """Set ``requires_grad=False`` on every parameter of ``torch_model`` named in ``frozen``."""
        named = dict(torch_model.named_parameters())  # TorchScript modules have no get_parameter
        for name in self.frozen:
            named[name].requires_grad_(False)


def base_lr(settings):
    """MXNet's base learning rate: ``learning_rate``, else the scheduler's ``base_lr``, else the optimizer default."""
    optimizer = settings["optimizer"]
    if optimizer.get("learning_rate") is not None:
        return float(optimizer["learning_rate"])
    if settings.get("lr_scheduler"):
        return float(settings["lr_scheduler"].get("base_lr", 0.01))
    return _DEFAULT_LR.get(optimizer["name"], 0.01)


def param_groups(torch_model, settings, mapping, unmapped="error"):
    """torch.optim param groups, one per distinct (lr, weight_decay, lr_mult, wd_mult, frozen), from MXNet settings.

    Every mapped torch parameter lands in exactly one group; groups come in MXNet index order of their first
    parameter. Frozen parameters go to groups with ``frozen=True`` and lr = weight_decay = 0 (so an optimizer keeps
    their state for a later unfreeze; torch optimizers skip them, as they get no gradient) and are listed in
    ``.frozen`` (the model is not changed: ``.apply_frozen(model)`` sets their ``requires_grad=False``). Each other
    group holds the absolute ``lr`` (``learning_rate * lr_mult``) and ``weight_decay`` (``wd * wd_mult``); every
    group holds ``lr_mult``, ``wd_mult``, ``frozen``, ``mx_names`` and ``mx_indices`` so schedulers keep the ratios
    and migrate can match states.

    Args:
        torch_model: The torch model whose parameters the groups hold.
        settings: The settings document (dict) or a path to the settings file.
        mapping: MXNet parameter name -> torch state_dict key (``migrate.NameMapping`` or any Mapping).
        unmapped: What to do with trainable torch parameters no MXNet parameter maps to: ``"error"`` raises,
            ``"freeze"`` lists them in ``.frozen``, ``"default"`` trains them with lr_mult = wd_mult = 1.
            Both of the latter warn with their names.

    Returns:
        A ``ParamGroups``: the list of param group dicts, ready for any ``torch.optim.Optimizer``, with ``frozen``.

    Raises:
        SettingsError: The settings lack a key, or ``unmapped`` is not one of the choices.
        MappingError: The mapping is not a name -> name mapping, names an MXNet parameter the settings lack or a
            torch key the model lacks, or (with ``unmapped="error"``) trainable torch parameters have no MXNet source.
        ModelTypeError: ``torch_model`` is not a ``torch.nn.Module`` instance.

    Examples:
        >>> groups = param_groups(model, "settings.json", {"dense0_weight": "fc.weight", "dense0_bias": "fc.bias"})
        >>> torch.optim.SGD(groups, lr=0.1, momentum=0.9)

    Note:
        Parameters are matched by the mapping, never by position; BatchNorm running statistics map to torch
        buffers and are skipped here (``convert_weights`` copies them; a Module's auxiliary states need not be in
        the settings). A tensor the mapping holds at a constant (``NameMapping.held``: a BatchNorm scale under
        MXNet's ``fix_gamma=True``) is frozen, as MXNet never trains it.
    """
    arguments.torch_model(torch_model, "param_groups(torch_model)")
    settings = as_settings(settings, SettingsError)
    if unmapped not in _UNMAPPED:
        raise SettingsError(f"param_groups got unmapped={unmapped!r}; expected one of {list(_UNMAPPED)}")
    sources = _torch_sources(torch_model, settings, mapping)
    held_names = getattr(mapping, "held", {})
    groups, by_key, frozen = [], {}, []
    for param, mx_name, entry in sources:
        is_frozen = bool(entry["frozen"]) or mx_name in held_names
        if is_frozen:
            frozen.append(mapping[mx_name])
        lr_mult, wd_mult = float(entry["lr_mult"]), float(entry["wd_mult"])
        key = (base_lr(settings) * lr_mult, float(settings["optimizer"]["wd"]) * wd_mult, lr_mult, wd_mult,
               is_frozen)
        if key not in by_key:
            held = 0.0 if key[4] else 1.0  # a frozen group trains nothing, even in an optimizer that ignores it
            by_key[key] = {"params": [], "lr": key[0] * held, "weight_decay": key[1] * held, "lr_mult": lr_mult,
                           "wd_mult": wd_mult, "frozen": key[4], "mx_names": [], "mx_indices": []}
            groups.append(by_key[key])
        by_key[key]["params"].append(param)
        by_key[key]["mx_names"].append(mx_name)
        by_key[key]["mx_indices"].append(entry["index"])
    frozen += _add_unmapped(torch_model, settings, sources, groups, unmapped)
    return ParamGroups(groups, frozen)


def settings_with_held_frozen(settings, mapping) -> dict:
    """A copy of ``settings`` whose parameters that ``mapping`` holds at a constant (``NameMapping.held``) are frozen:
    the groups ``param_groups`` makes from it equal those it makes from ``settings`` and ``mapping``, also when the
    mapping is later a plain dict (``optimizer.pt`` keeps these settings and the names only).

    Args:
        settings: The settings document (dict) or a path to the settings file.
        mapping: MXNet name -> torch key; ``NameMapping.held`` when it has it.

    Returns:
        The settings document (a new dict; ``settings`` is left alone).

    Raises:
        SettingsError: The settings file cannot be read or is not a settings document.

    Examples:
        >>> settings_with_held_frozen("settings.json", mapping)["params"]["bn1_gamma"]["frozen"]  # doctest: +SKIP
        True
    """
    settings = as_settings(settings, SettingsError)
    held = getattr(mapping, "held", {})
    params = {name: dict(entry, frozen=True) if name in held else entry for name, entry in settings["params"].items()}
    return dict(settings, params=params)


def _torch_sources(torch_model, settings, mapping):
    """(torch parameter, MXNet name, settings entry) in MXNet index order, checking the mapping both ways."""
    arguments.name_table(mapping)
    named = dict(torch_model.named_parameters())
    buffers = dict(torch_model.named_buffers())
    unknown_mx = sorted(name for name in mapping if name not in settings["params"] and mapping[name] not in buffers)
    missing = sorted(f"{name} -> {mapping[name]}" for name in mapping
                     if mapping[name] not in named and mapping[name] not in buffers)
    problems = ([f"MXNet parameters not in the settings: {unknown_mx[:10]}"] if unknown_mx else []) + (
        [f"torch keys not in the {type(torch_model).__name__} model: {missing[:10]}"] if missing else [])
    if problems:
        raise MappingError(f"mapping does not fit the models ({'; '.join(problems)}); rebuild the mapping "
                           f"from these two models")
    targets = {}
    for name in mapping:
        targets.setdefault(mapping[name], []).append(name)
    shared = sorted(f"{key} <- {names}" for key, names in targets.items() if len(names) > 1)
    if shared:
        raise MappingError(f"mapping sends several MXNet parameters to one torch key: {shared[:10]}; "
                           f"each torch parameter needs exactly one MXNet source")
    entries = sorted(settings["params"].items(), key=lambda item: item[1]["index"])
    return [(named[mapping[name]], name, entry) for name, entry in entries
            if name in mapping and mapping[name] in named]


def _add_unmapped(torch_model, settings, sources, groups, unmapped) -> list:
    """Handle trainable torch parameters that no MXNet parameter maps to, as ``unmapped`` says; return those to
    freeze."""
    mapped = {id(param) for param, _, _ in sources}
    orphans = [(name, p) for name, p in torch_model.named_parameters() if p.requires_grad and id(p) not in mapped]
    if not orphans:
        return []
    names = [name for name, _ in orphans]
    if unmapped == "error":
        raise MappingError(f"torch parameters {names[:10]} ({len(names)} in all) have no MXNet source in the "
                           f"mapping; extend the mapping, or pass unmapped='freeze' or unmapped='default'")
    warnings.warn(f"torch parameters {names} have no MXNet source; unmapped={unmapped!r}", stacklevel=3)
    if unmapped == "freeze":
        return names
    start = 1 + max((entry["index"] for entry in settings["params"].values()), default=-1)
    groups.append({"params": [p for _, p in orphans], "lr": base_lr(settings),
                   "weight_decay": float(settings["optimizer"]["wd"]), "lr_mult": 1.0, "wd_mult": 1.0,
                   "frozen": False, "mx_names": [], "mx_indices": list(range(start, start + len(orphans)))})
    return []
