"""Freezing, element masks, held norm statistics and per-layer rates on the torch side, as LrTrainer has them.

``TorchControl`` drives one torch model and the optimizer ``torch_optimizer`` built for it (its groups carry
``lr_mult``, ``wd_mult``, ``frozen`` and ``mx_names``); ``control_from_mxnet`` rebuilds, from the settings file and
LrTrainer's states file, what LrTrainer held when the training left MXNet and lists what could not cross.

The semantics are LrTrainer's (``gluon_lr/freeze.py``):

- freeze: the parameter moves to a group with ``frozen=True`` (migrate's exact optimizers skip such groups, any torch
  optimizer skips it since it gets ``requires_grad=False`` and no gradient), so its value, optimizer state and
  update count stand still; unfreeze moves it back and the next step resumes from that state and count.
- element masks: around every ``optimizer.step()`` of migrate's exact optimizers the masked elements of the weight and
  of every state tensor of its shape are copied and written back, bit for bit (a state created by this step gets
  zeros there, as MXNet creates zero state before its masked update); the update count runs on. Of a sharded
  (DTensor) parameter, each rank does so on the block it holds.
- held norm statistics: a BatchNorm-like module (``running_mean``/``running_var`` buffers) whose trainable parameters
  are all frozen gets ``momentum = 0.0`` (torch's update ``(1 - momentum)*running + momentum*batch`` then leaves the
  statistics as they are, bit for bit, while train-mode forwards still normalise with the batch's statistics, as
  MXNet's do) and a forward hook that keeps ``num_batches_tracked``; unfreezing one of its parameters releases the
  hold and gives the module its momentum back. (A batch holding NaN would still reach the statistics: 0*NaN.)
"""
import base64
import difflib
import fnmatch

import numpy as np
import torch

from mxformats.settings import as_settings
from mxformats.states import split_states, states_bytes
from migrate import arguments
from migrate.distributed import held_part
from migrate.errors import InputFileError, MappingError, SettingsError, UnsupportedOptimizerError
from migrate.optim.sharded import local

__all__ = ["TorchControl", "control_from_mxnet"]



class TorchControl:
    """Freeze, unfreeze, mask and re-rate the parameters of a migrated torch model, with LrTrainer's semantics.

    Args:
        model: The torch model.
        optimizer: Its optimizer from ``torch_optimizer`` (groups with ``lr_mult``, ``wd_mult``, ``frozen``).
        mapping: MXNet name -> torch name, so selectors may use MXNet names too; None for torch names only.

    Raises:
        MappingError: a parameter of the optimizer is not one of the model's, or ``mapping`` is not None or a
            name -> name mapping.
        ModelTypeError: ``model`` is not a ``torch.nn.Module`` instance.
        ArgumentError: ``optimizer`` is not a ``torch.optim.Optimizer``.

    Examples:
        >>> control = TorchControl(model, optimizer, mapping)
        >>> control.freeze("features.*")
        >>> control.unfreeze("fc0_weight")   # an MXNet name
    """

    def __init__(self, model, optimizer, mapping=None):
        arguments.torch_model(model, "TorchControl(model)")
        arguments.torch_optimizer(optimizer, "TorchControl(optimizer)")
        if mapping is not None:
            arguments.name_table(mapping, "TorchControl(mapping)")
        self.model, self.optimizer = model, optimizer
        self._named = dict(model.named_parameters())
        self._names = {id(p): n for n, p in self._named.items()}
        self._mx = {mx: t for mx, t in (mapping or {}).items() if t in self._named}
        stray = [type(p).__name__ for g in optimizer.param_groups for p in g["params"] if id(p) not in self._names]
        if stray:
            raise MappingError(f"TorchControl: {len(stray)} optimizer parameters are not parameters of the "
                               f"{type(model).__name__} model; pass the model the optimizer was built for")
        self._masks = {}       # torch name -> bool tensor (True = frozen element)
        self._no_hold = set()  # norm module names whose statistics run although they are frozen
        self._held = {}        # norm module name -> (forward hook handle, momentum before the hold)
        self._norms = _norm_modules(model, self._names)
        previous = getattr(optimizer, "_control", None)
        if previous is not None:  # one control per optimizer: the new one takes over the holds
            previous._no_hold = set(previous._norms)
            previous._update_held()
        optimizer._control = self
        for name in self.frozen:
            self._named[name].requires_grad_(False)
        self._update_held()

    @classmethod
    def of(cls, optimizer):
        """The TorchControl attached to ``optimizer`` (``load_migration`` attaches one), or None."""
        return getattr(optimizer, "_control", None)

    # ------------------------------------------------------------------------------------------------ selection
    def select(self, select) -> list:
        """Torch names that ``select`` picks, in model order.

        Args:
            select: A torch or MXNet parameter name, a glob over either (``'features.*'``, ``'*_bias'``), a torch
                Parameter or Module (its parameters), or a list of those (their union).

        Raises:
            MappingError: a selector picks nothing (the nearest names are listed) or is of another type.
        """
        picked = set(self._picked(select))
        return [name for name in self._named if name in picked]

    def _picked(self, select) -> list:
        if isinstance(select, (list, tuple)):
            return [name for item in select for name in self._picked(item)]
        if isinstance(select, torch.nn.Parameter) and id(select) in self._names:
            return [self._names[id(select)]]
        if isinstance(select, torch.nn.Module):
            return [self._names[id(p)] for p in select.parameters() if id(p) in self._names]
        if not isinstance(select, str):
            raise MappingError(f"TorchControl: select must be a parameter name, a glob, a Parameter or Module of "
                               f"the model, or a list of them, got {type(select).__name__} {select!r:.60}")
        if select in self._named:
            return [select]
        if select in self._mx:
            return [self._mx[select]]
        hits = [n for n in self._named if fnmatch.fnmatchcase(n, select)]
        hits += [t for mx, t in self._mx.items() if fnmatch.fnmatchcase(mx, select)]
        if not hits:
            known = list(self._named) + list(self._mx)
            raise MappingError(f"TorchControl: {select!r} selects no parameter (torch or MXNet name, glob); the "
                               f"nearest names are {difflib.get_close_matches(select, known, 5, 0.3)}")
        return hits

    # ------------------------------------------------------------------------------------------ freeze / unfreeze
    @property
    def frozen(self) -> frozenset:
        """Torch names of the wholly frozen parameters (those in groups with ``frozen=True``)."""
        return frozenset(self._names[id(p)] for g in self.optimizer.param_groups if g.get("frozen")
                         for p in g["params"])

    @property
    def masked_elements(self) -> dict:
        """torch name -> number of frozen elements, for parameters with an element mask."""
        return {name: int(mask.sum()) for name, mask in self._masks.items()}

    @property
    def held_norm_layers(self) -> list:
        """Names of the norm modules whose running statistics are held."""
        return sorted(self._held)

    def freeze(self, select, mask=None, hold_norm_stats: bool = True) -> list:
        """Freeze the selected parameters whole, or with ``mask`` the masked elements of one parameter.

        Args:
            select: As for ``select``.
            mask: 0/1 array of the parameter's torch shape (1 = frozen element); one parameter only.
            hold_norm_stats: Hold the running statistics of norm layers whose parameters are now all frozen.

        Returns:
            The torch names frozen (or masked).

        Raises:
            MappingError: nothing selected, a mask for several parameters, or a mask of another shape or values.
        """
        names = self.select(select)
        if mask is not None:
            self._set_mask(names, mask)
            return names
        for name in names:
            self._masks.pop(name, None)
            self._move(name, frozen=True)
        touched = {m for m, params in self._norms.items() if set(params) & set(names)}
        self._no_hold = self._no_hold - touched if hold_norm_stats else self._no_hold | touched
        self._update_held()
        return names

    def unfreeze(self, select) -> list:
        """Unfreeze the selected parameters (whole or masked); they resume from the state they kept.

        Returns:
            The torch names unfrozen.
        """
        names = self.select(select)
        for name in names:
            self._masks.pop(name, None)
            self._move(name, frozen=False)
        self._update_held()
        return names

    def _set_mask(self, names, mask):
        if len(names) != 1:
            raise MappingError(f"TorchControl.freeze: a mask applies to one parameter, the selector picks "
                               f"{len(names)} ({names[:5]}); select one parameter")
        name, param = names[0], self._named[names[0]]
        from migrate.optim.base import MXNetOptimizer
        if not isinstance(self.optimizer, MXNetOptimizer):
            raise UnsupportedOptimizerError(f"TorchControl.freeze({name!r}, mask=...): element masks need one of "
                                            f"migrate's exact optimizers (they call the mask hook around each step), "
                                            f"got {type(self.optimizer).__name__}; build it with "
                                            f"migrate.torch_optimizer")
        values = mask.detach().cpu().numpy() if torch.is_tensor(mask) else np.asarray(mask)
        if values.shape != tuple(param.shape) or not np.isin(values, (0, 1)).all():
            raise MappingError(f"TorchControl.freeze: the mask of {name!r} must be 0/1 of the parameter's torch "
                               f"shape {tuple(param.shape)}, got shape {values.shape}; build it with that shape")
        if name in self.frozen:
            self.unfreeze(name)
        self._masks[name] = torch.as_tensor(values.astype(bool), device=param.device)

    def _move(self, name, frozen):
        """Move a parameter to the group of the same (lr_mult, wd_mult) with ``frozen``; set requires_grad."""
        param = self._named[name]
        group = self._group_of(param)
        if group is None or bool(group.get("frozen")) == frozen:  # not the optimizer's, or already there
            param.requires_grad_(not frozen)
            return
        self._regroup(param, group, dict(frozen=frozen))
        param.requires_grad_(not frozen)
        if frozen:
            param.grad = None

    def _group_of(self, param):
        for group in self.optimizer.param_groups:
            if any(p is param for p in group["params"]):
                return group
        return None

    def _regroup(self, param, group, change):
        """Move ``param`` from ``group`` to the group with ``change`` applied to its keys (made when missing)."""
        keys = {k: group.get(k) for k in ("lr_mult", "wd_mult", "frozen")}
        keys.update(change)
        target = next((g for g in self.optimizer.param_groups if all(g.get(k) == v for k, v in keys.items())), None)
        position = next(i for i, p in enumerate(group["params"]) if p is param)
        if target is None:
            target = {k: v for k, v in group.items() if k not in ("params", "mx_names", "mx_indices")}
            target.update(keys, params=[], mx_names=[], mx_indices=[])
            held = 0.0 if keys["frozen"] else 1.0  # frozen groups: lr = weight_decay = 0, as param_groups makes them
            target["lr"] = _base(self.optimizer, "lr", "lr_mult") * keys["lr_mult"] * held
            target["weight_decay"] = _base(self.optimizer, "weight_decay", "wd_mult") * keys["wd_mult"] * held
            self.optimizer.param_groups.append(target)
        target["params"].append(group["params"].pop(position))
        for key in ("mx_names", "mx_indices"):
            if len(group.get(key, ())) > position:
                target[key].append(group[key].pop(position))

    # ------------------------------------------------------------------------------------- layer rates
    def set_lr_mult(self, select, lr_mult: float) -> list:
        """Give the selected parameters ``lr_mult`` (their group's lr follows: base lr * lr_mult).

        Returns:
            The torch names changed.
        """
        if not isinstance(lr_mult, (int, float)) or isinstance(lr_mult, bool) or not lr_mult >= 0:
            raise MappingError(f"TorchControl.set_lr_mult: lr_mult must be a number >= 0, got {lr_mult!r}")
        names = self.select(select)
        for name in names:
            group = self._group_of(self._named[name])
            if group is not None and group.get("lr_mult") != float(lr_mult):
                self._regroup(self._named[name], group, dict(lr_mult=float(lr_mult)))
        return names

    def layer_decay(self, layers: list, decay: float) -> list:
        """Layer-wise lr decay: ``layers`` input side first, each a selector; the last gets lr_mult 1, the one
        before ``decay``, then ``decay**2``... (as ``gluon_lr.layer_decay``).

        Returns:
            The lr_mult given to each layer, input side first.
        """
        mults = [float(decay) ** (len(layers) - 1 - i) for i in range(len(layers))]
        for layer, mult in zip(layers, mults):
            self.set_lr_mult(layer, mult)
        return mults

    def gradual_unfreezing(self, layers: list, epoch: int, every: int = 1) -> list:
        """ULMFiT's schedule at ``epoch``: the last ``1 + epoch // every`` of ``layers`` (input side first)
        trainable, the others frozen (as ``gluon_lr.GradualUnfreezing.begin_epoch``). Depends on ``epoch`` only.

        Returns:
            The torch names trainable after the call, among those of ``layers``.
        """
        trainable = min(len(layers), 1 + epoch // every)
        cut = len(layers) - trainable
        if cut:
            self.freeze(list(layers[:cut]))
        return self.unfreeze(list(layers[cut:]))

    # ---------------------------------------------------------------------------------- held norm statistics
    def _update_held(self):
        frozen = self.frozen
        want = {m for m, params in self._norms.items() if m not in self._no_hold and params <= frozen}
        modules = dict(self.model.named_modules())
        for name in set(self._held) - want:
            handle, momentum = self._held.pop(name)
            handle.remove()
            modules[name].momentum = momentum
        for name in want - set(self._held):
            module = modules[name]
            if isinstance(module, torch.jit.ScriptModule):  # no hooks: control_from_mxnet reports it as lost
                continue
            count = getattr(module, "num_batches_tracked", None)
            copy = count.detach().clone() if count is not None else None
            self._held[name] = (module.register_forward_hook(_count_restorer(copy)), module.momentum)
            module.momentum = 0.0

    # ------------------------------------------------------------------------------------ around a step
    def before_step(self) -> list:
        """Copies of the masked elements of each masked parameter and its state (called by the exact optimizers)."""
        saved = []
        for name, mask in self._masks.items():
            param = self._named[name]
            if param.grad is None:
                continue
            held = held_part(mask, param)  # of a DTensor, the block this rank holds
            state = self.optimizer.state.get(param, {})
            tensors = {key: local(value) for key, value in state.items() if _like(value, param)}
            saved.append((param, held, local(param.detach())[held].clone(),
                          {key: value[held].clone() for key, value in tensors.items()}))
        return saved

    def after_step(self, saved: list) -> None:
        """Write the masked elements back (state created by this step gets zeros there, as in MXNet)."""
        with torch.no_grad():
            for param, mask, weight, states in saved:
                local(param.detach())[mask] = weight
                for key, value in self.optimizer.state.get(param, {}).items():
                    if _like(value, param):
                        local(value)[mask] = states[key] if key in states else 0

    # -------------------------------------------------------------------------------------------- records
    def records(self) -> dict:
        """What ``load_records`` needs (masks as bool tensors, norm modules left running); torch.save-able."""
        return {"masks": {name: mask.cpu() for name, mask in self._masks.items()},
                "no_hold": sorted(self._no_hold)}

    def load_records(self, records: dict) -> None:
        """Apply ``records()`` of an earlier control over the same model."""
        self._no_hold = set(records.get("no_hold", ()))
        for name, mask in records.get("masks", {}).items():
            self._set_mask([name], mask)
        self._update_held()


def _like(value, param) -> bool:
    return torch.is_tensor(value) and value.shape == param.shape and value.dtype.is_floating_point


def _count_restorer(copy):
    """A forward hook writing ``num_batches_tracked`` back (a held layer's forwards must not count)."""
    def restore(module, inputs, output):
        if copy is not None:
            module.num_batches_tracked.copy_(copy)
    return restore


def _norm_modules(model, names) -> dict:
    """Module name -> set of torch names of its own parameters, for modules with running statistics."""
    out = {}
    for name, module in model.named_modules():
        if getattr(module, "running_mean", None) is not None and getattr(module, "running_var", None) is not None:
            own = {names[id(p)] for p in module.parameters(recurse=False) if id(p) in names}
            if own:
                out[name] = own
    return out


def _base(optimizer, key, mult_key) -> float:
    """The current base value of ``key`` (lr or weight_decay): from a trained group with a multiplier, else the
    optimizer's default (migrate's optimizers hold MXNet's base values there)."""
    for group in optimizer.param_groups:
        if not group.get("frozen") and group.get(mult_key):
            return group[key] / group[mult_key]
    return optimizer.defaults.get(key, 0.0)


def control_from_mxnet(model, optimizer, settings, mapping, states=None) -> tuple:
    """The TorchControl holding what LrTrainer held (frozen parameters, masks, held norm statistics) and what could
    not cross.

    Frozen parameters come from the settings (``torch_optimizer`` already grouped them); masks and
    ``hold_norm_stats`` from LrTrainer's states file header. Masks are converted to torch layout with
    ``mapping.to_torch`` when the mapping has it.

    Args:
        model: The torch model.
        optimizer: Its ``torch_optimizer``.
        settings: The settings document or its path.
        mapping: MXNet name -> torch name.
        states: LrTrainer's states file (path or bytes), or None.

    Returns:
        ``(control, lost)``: ``lost`` lists, one sentence each, what LrTrainer held that torch does not (empty when
        everything crossed).

    Raises:
        InputFileError: the states file cannot be read.
        ModelTypeError, ArgumentError, MappingError: ``model``, ``optimizer`` or ``mapping`` is of another kind.

    Examples:
        >>> control, lost = control_from_mxnet(model, opt, "settings.json", mapping, "trainer.states")
    """
    arguments.torch_model(model, "control_from_mxnet(model)")
    arguments.torch_optimizer(optimizer, "control_from_mxnet(optimizer)")
    arguments.name_table(mapping, "control_from_mxnet(mapping)")
    settings = as_settings(settings, SettingsError)
    header = None
    if states is not None:
        header, _ = split_states(states_bytes(states, error=InputFileError), "states", error=InputFileError)
    control, lost = TorchControl(model, optimizer, mapping), []
    records = {r["name"]: r for r in header or ()}
    buffers = dict(model.named_buffers())
    for mx_name, entry in settings["params"].items():
        record, torch_name = records.get(mx_name, {}), mapping.get(mx_name) if hasattr(mapping, "get") else None
        if entry["masked_elements"] and not record.get("mask"):
            lost.append(f"element mask of {mx_name} ({entry['masked_elements']} elements): the masks are in "
                        f"LrTrainer's states file, pass it (--states)")
        elif record.get("mask") and torch_name not in control._named:
            lost.append(f"element mask of {mx_name}: no torch parameter is mapped to it")
        elif record.get("mask"):
            try:
                control.freeze(torch_name, mask=_torch_mask(mapping, mx_name, record["mask"], entry["shape"]))
            except UnsupportedOptimizerError as exc:
                lost.append(f"element mask of {mx_name}: {exc}")
        if entry["frozen"] and torch_name not in control._named and torch_name not in buffers:
            lost.append(f"frozen parameter {mx_name}: no torch parameter is mapped to it")
        if entry["frozen"] and record.get("hold_norm_stats") is False and torch_name in control._named:
            control._no_hold |= {m for m, params in control._norms.items() if torch_name in params}
    control._update_held()
    lost += _norm_lost(control, settings, mapping, records)
    return control, lost


def _torch_mask(mapping, mx_name, text, shape):
    """A states file's mask (base64 of packed bits, MXNet layout; ``gluon_lr.freeze``) as 0/1 in torch layout."""
    bits = np.unpackbits(np.frombuffer(base64.b64decode(text), dtype=np.uint8))
    values = bits[:int(np.prod(shape))].reshape(tuple(shape)).astype(np.float32)
    convert = getattr(mapping, "to_torch", None)
    return np.asarray(convert(mx_name, values) if convert is not None else values)


def _norm_lost(control, settings, mapping, records) -> list:
    """Held norm layers of MXNet (all trainable parameters frozen, holding) whose torch side holds nothing."""
    lost = []
    held = {p for m in control.held_norm_layers for p in control._norms[m]}
    params = settings["params"]
    for mx_name, entry in params.items():
        torch_name = mapping.get(mx_name) if hasattr(mapping, "get") else None
        prefix = mx_name[:-len("gamma")] if mx_name.endswith("gamma") else mx_name[:-len("beta")]
        layer = [params.get(prefix + kind) for kind in ("gamma", "beta") if prefix + kind in params]
        is_norm = mx_name.endswith(("gamma", "beta")) and all(e["frozen"] for e in layer)
        if is_norm and records.get(mx_name, {}).get("hold_norm_stats", True) and torch_name in control._named \
                and torch_name not in held:
            lost.append(f"held running statistics of the norm layer of {mx_name}: its torch parameter "
                        f"{torch_name} belongs to no module with running_mean/running_var, or that module has "
                        f"trainable parameters")
    return lost
