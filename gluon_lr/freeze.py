"""Freezing that really freezes: whole parameters, element masks, and the running statistics of frozen norm layers.

How each guarantee is kept (MXNet 1.9.1):

- Whole parameters: ``grad_req='null'``. Gluon then computes no gradient for them (backward gets cheaper, also in a
  hybridized net: the cached graph's backward is rebuilt for the new requests), pushes nothing to the kvstore, and
  never calls the updater for them, so the weight, every optimizer state array, weight decay and the per-parameter
  update count (``optimizer._index_update_count``, Adam's bias correction) all stand still. Unfreezing restores the
  previous ``grad_req``; the next update then uses the state and count the parameter had when it was frozen, exactly
  as if the frozen steps had not happened for it.
- Exception, a partially frozen FullyConnected layer: MXNet 1.9.1's oneDNN (MKLDNN) FullyConnected backward on CPU
  computes the bias gradient only inside its weight-gradient branch, so with the weight's ``grad_req='null'`` and the
  bias trainable the bias gradient is never written (it keeps its previous value, or zeros). Measured: float32
  ``Dense`` and ``RNNCell``'s i2h/h2h (they call FullyConnected), hybridized or not, with and without
  ``static_alloc``/``static_shape``; not Convolution, Deconvolution, BatchNorm, LayerNorm, GroupNorm, fused RNN
  layers, float64 Dense, nor any op with ``MXNET_MKLDNN_ENABLED=0``; freezing the bias alone is fine. So a frozen
  2-D ``*weight`` whose ``*bias`` sibling (same prefix, shape ``(units,)``) is trainable keeps ``grad_req='write'``
  when this MXNet build has MKLDNN: its gradient is computed (the backward pays the weight-gradient GEMM it would
  have paid unfrozen) but ``Freezer.excluded`` hides it from the trainer's push/pull and update loop, so its value,
  state and update count stay bit-identical all the same. When the bias is frozen too, both go to ``'null'``.
- Element masks: before each update the weight and every optimizer state array of a masked parameter are copied;
  after it, the masked elements are written back (``where(mask, saved, new)``), bit for bit, on every context. With
  ``update_on_kvstore=True`` the update runs inside the kvstore's updater on the kvstore's own copy of the weight, so
  there the copy and restore run inside that updater (``_MaskingUpdater``) and the pull spreads the result.
- Norm statistics: a norm layer whose trainable parameters are all frozen has its running mean/var copied when the
  hold starts and written back at every ``step``/``update`` (the forward pass in train mode keeps updating them in
  place, also inside hybridized parents, whose cached graphs ignore later changes of a child's ``momentum`` or
  ``use_global_stats``). So they are fixed after every step; between a train-mode forward and the next step they
  hold that batch's values.

What is global and so not "as if the frozen steps had not happened": ``optimizer.num_update`` (the largest count of
any parameter) drives ``lr_scheduler``; the schedule follows the training's global step, for unfrozen parameters too
(MXNet alone would give a parameter that lags behind and is updated first the previous step's rate for the rest of
training, whenever updates are not aggregated: ``align_num_update`` fixes that before each update round; on dist
kvstore servers, which hold their own optimizer, that fix cannot apply). Nadam's momentum schedule
(``optimizer.m_schedule``) is one number advanced once per parameter update of ANY parameter, so freezing some
parameters changes how fast it advances for the others (and with several contexts updating on the workers each
context advances it, so MXNet's Nadam replicas drift apart by themselves). Element masks keep the per-parameter count running (the
tensor is updated), so Adam's bias correction of released elements uses the tensor's count.
"""
import base64
import contextlib
import dataclasses
import os
from typing import Iterable, Mapping

import mxnet as mx
import numpy as np
from mxnet import gluon, nd
from mxnet import initializer as mx_init

from . import rules as _rules
from .errors import MaskError, ParamsTypeError, RuleMatchError, StatesFileError, UnknownParameterError
from mxformats.optimizer_state import state_arrays
from ._fused.table import ready_state

__all__ = ["Freezer"]

_STAT_SUFFIXES = ("running_mean", "running_var", "moving_mean", "moving_var")
#: MXNet's oneDNN FullyConnected backward drops the bias gradient when the weight needs none (see module docstring).
_FC_BIAS_NEEDS_WEIGHT_GRAD = (mx.runtime.Features().is_enabled("MKLDNN")
                              and os.environ.get("MXNET_MKLDNN_ENABLED", "1") != "0")


@dataclasses.dataclass
class _NormLayer:
    """A norm layer found among the trainer's parameters: its trainable and its statistics parameter names."""

    trainable: tuple
    stats: tuple


def _norm_layers(params: list, kinds: Mapping) -> dict:
    """Norm layers with running statistics, keyed by the prefix Gluon gave their parameters (``prefix + attr``)."""
    groups = {}
    for param in params:
        if "norm" not in kinds[param.name].kinds:
            continue
        for suffix in _rules.NORM_SUFFIXES:
            if param.name.endswith(suffix):
                groups.setdefault(param.name[:-len(suffix)], []).append(param)
                break
    layers = {}
    for prefix, members in groups.items():
        stats = tuple(p.name for p in members if p.name.endswith(_STAT_SUFFIXES))
        trainable = tuple(p.name for p in members if p.grad_req != "null" and p.name not in stats)
        if stats and trainable:
            layers[prefix] = _NormLayer(trainable, stats)
    return layers


def _fc_biases(params: list) -> dict:
    """weight name -> bias name for FullyConnected-like pairs: a 2-D ``<prefix>weight`` and a 1-D ``<prefix>bias``
    of the weight's first dimension (a dimension still unknown under deferred initialisation, <= 0, matches)."""
    by_name = {p.name: p for p in params}
    pairs = {}
    for param in params:
        bias = by_name.get(param.name[:-len("weight")] + "bias") if param.name.endswith("weight") else None
        if bias is None:
            continue
        shape, bias_shape = tuple(param.shape or ()), tuple(bias.shape or ())
        units = shape[0] if len(shape) == 2 else None
        if units is not None and len(bias_shape) == 1 and (units == bias_shape[0] or min(units, bias_shape[0]) <= 0):
            pairs[param.name] = bias.name
    return pairs


def _snapshot(getters: Iterable, mask: "_Mask") -> list:
    """(getter, copy, mask) for each array; a getter returns the array again at restore time.

    Arrays are looked up again when restoring because an update path may replace them (e.g. with views into flat
    buffers) during the update.
    """
    saved = []
    for get in getters:
        arr = get()
        saved.append((get, arr.copy(), mask.like(arr)))
    return saved


def _restore(saved: list) -> None:
    """Write the masked elements of each saved copy back into its (current) array, in place."""
    for get, copy, mask in saved:
        arr = get()
        arr[:] = nd.where(mask, copy, arr)


def _getters(updater, index, param_or_weight, ctx_pos=None) -> list:
    """Getters of the weight (of a Parameter on context ``ctx_pos``, or a fixed array) and of each state array."""
    def get_weight():
        if ctx_pos is None:
            return param_or_weight  # the kvstore's own copy of the weight stays the same array
        return param_or_weight.list_data()[ctx_pos]

    def get_state(j):
        return lambda: state_arrays(updater.states[index])[j]

    count = len(state_arrays(ready_state(updater, index, get_weight())))  # created or synced first
    return [get_weight] + [get_state(j) for j in range(count)]


class _Mask:
    """One parameter's element mask (1 = frozen element), cached per (context, dtype)."""

    def __init__(self, values: np.ndarray):
        self.values = values
        self.count = int(values.sum())
        self._cache = {}

    def like(self, arr: nd.NDArray) -> nd.NDArray:
        """The mask as an NDArray in ``arr``'s context and dtype."""
        key = (str(arr.context), str(np.dtype(arr.dtype)))
        if key not in self._cache:
            self._cache[key] = nd.array(self.values, ctx=arr.context, dtype=arr.dtype)
        return self._cache[key]


class _HeldStat:
    """The values one norm statistic had when its layer was frozen, written back after every update.

    A parameter still waiting for deferred initialisation gets its initial values from its own initializer (as
    ``Parameter._finish_deferred_init`` does) on the first restore, since the first forward already moved them.
    """

    def __init__(self, param, copies, deferred):
        self._param, self._copies, self._deferred = param, copies, deferred

    def restore(self) -> None:
        """Write the held values back into every context's array."""
        arrays = self._param.list_data()
        if self._copies is None:
            init, _, default_init, _ = self._deferred
            self._copies = [nd.zeros(a.shape, ctx=a.context, dtype=a.dtype) for a in arrays]
            for copy in self._copies:
                mx_init.create(default_init)(mx_init.InitDesc(self._param.name, {"__init__": init}), copy)
        for arr, copy in zip(arrays, self._copies):
            copy.copyto(arr)


def _held_copy(param) -> _HeldStat:
    """Hold ``param``'s current values (or, if its initialisation is deferred, its initial values)."""
    if param._deferred_init:
        return _HeldStat(param, None, param._deferred_init)
    return _HeldStat(param, [arr.copy() for arr in param.list_data()], None)


class _MaskingUpdater:
    """Wraps a kvstore's Updater: masked elements of the weight and state stay as they were around each update.

    Every other attribute (``states``, ``optimizer``, ``get_states``, ``set_states``) is the wrapped Updater's.
    """

    def __init__(self, inner, freezer: "Freezer", names: list):
        self._inner = inner
        self._freezer = freezer
        self._names = names

    def __getattr__(self, name):
        """Delegate everything else to the wrapped Updater."""
        return getattr(self._inner, name)

    def __call__(self, index, grad, weight):
        """Update as the wrapped Updater does, restoring masked elements afterwards."""
        indices = list(index) if isinstance(index, (list, tuple)) else [index]
        weights = list(weight) if isinstance(weight, (list, tuple)) else [weight]
        saved = []
        for idx, arr in zip(indices, weights):
            mask = self._freezer._masks.get(self._names[int(idx)])
            if mask is not None:
                saved += _snapshot(_getters(self._inner, idx, arr), mask)
        self._inner(index, grad, weight)
        _restore(saved)


class Freezer:
    """The freeze state of one LrTrainer: frozen names, element masks, held norm statistics.

    LrTrainer owns one and delegates ``freeze``/``unfreeze`` to it; see the module docstring for the mechanics.

    Args:
        params: The trainer's Parameters, in its index order.
        kinds: name -> ``rules.ParamKinds`` (from ``rules.collect_params``).

    Examples:
        >>> freezer = Freezer(trainer._params, trainer._kinds)
        >>> freezer.freeze(["dense0_weight"])
    """

    def __init__(self, params: list, kinds: Mapping):
        self._params = {p.name: p for p in params}
        self._kinds = kinds
        self._names = [p.name for p in params]
        self._grad_req = {}          # frozen name -> grad_req to restore on unfreeze
        self._fc_bias = _fc_biases(params) if _FC_BIAS_NEEDS_WEIGHT_GRAD else {}  # weight name -> bias name
        self._kept = set()           # frozen names that keep grad_req='write' (see module docstring)
        self._masks = {}             # name -> _Mask
        self._layers = _norm_layers(params, kinds)
        self._no_hold = set()        # norm-layer prefixes whose statistics the user lets run
        self._held = {}              # norm-layer prefix -> [(array, copy)] of its statistics

    # --------------------------------------------------------------------------------------------- selection
    def select(self, select) -> list:
        """Names of the trainer's parameters that ``select`` picks, in index order.

        Args:
            select: An exact parameter name, a Rule selector (glob, ``'re:<regex>'``, layer kind), a ``Rule``, a
                Parameter, a Block (its parameters), or a list/tuple of those (their union).

        Returns:
            The selected names, in the trainer's index order.

        Raises:
            ParamsTypeError: ``select`` is of another type.
            UnknownParameterError: a Parameter or Block's parameter is not one of the trainer's.
            RuleMatchError: a selector matches no parameter (the nearest names are listed).
        """
        picked = set(self._picked(select))
        return [name for name in self._names if name in picked]

    def _picked(self, select) -> list:
        """Names picked by one selector (unordered, may repeat)."""
        if isinstance(select, (list, tuple)):
            return [name for item in select for name in self._picked(item)]
        if isinstance(select, _rules.Rule):
            select = select.select
        if isinstance(select, str):
            return self._by_selector(select)
        if isinstance(select, gluon.Parameter):
            return [self._own(select)]
        if isinstance(select, gluon.Block):
            return [self._own(p) for p in select.collect_params().values()]
        raise ParamsTypeError(f"freeze/unfreeze select must be a parameter name, a Rule selector, a Rule, a "
                              f"Parameter, a Block or a list of them, got {type(select).__name__} {select!r:.60}; "
                              f"pass e.g. 'features_*' or net.features.")

    def _own(self, param) -> str:
        """The name of ``param`` if it is this trainer's Parameter object."""
        if self._params.get(param.name) is not param:
            raise UnknownParameterError(f"Parameter {param.name!r} is not one of this trainer's "
                                        f"{len(self._names)} parameters; freeze parameters the trainer was built "
                                        f"with (e.g. the Block passed as params).")
        return param.name

    def _by_selector(self, select: str) -> list:
        """Names an exact name or a Rule selector picks."""
        if select in self._params:
            return [select]
        rule = _rules.Rule(select, lr_mult=1.0)
        hits = [n for n in self._names if rule.selects(n, self._kinds[n].kinds)]
        if not hits:
            raise RuleMatchError(f"freeze/unfreeze selector {select!r} selects no parameter among "
                                 f"{len(self._names)}; the nearest names are "
                                 f"{_rules.nearest_names(select, self._names)}."
                                 f" Globs match the whole name; regexes need 're:'.")
        return hits

    # ---------------------------------------------------------------------------------------- freeze / unfreeze
    @property
    def frozen(self) -> frozenset:
        """Names of the wholly frozen parameters."""
        return frozenset(self._grad_req)

    @property
    def masked_elements(self) -> dict:
        """name -> number of frozen elements, for parameters with an element mask."""
        return {name: mask.count for name, mask in self._masks.items()}

    def freeze(self, names: list, hold_norm_stats: bool = True) -> None:
        """Freeze whole parameters (``grad_req='null'``, but see ``_set_frozen_grad_req``) and drop their masks; then
        update the held norm layers."""
        for name in names:
            self._masks.pop(name, None)
            if name not in self._grad_req and self._params[name].grad_req != "null":
                self._grad_req[name] = self._params[name].grad_req
        self._set_frozen_grad_req()
        touched = {prefix for prefix, layer in self._layers.items() if set(layer.trainable) & set(names)}
        self._no_hold = self._no_hold - touched if hold_norm_stats else self._no_hold | touched
        self._update_held()

    def apply_rules(self, rules, matched) -> None:
        """Freeze (``freeze=True``) or unfreeze (``freeze=False``) what each rule selects, in rule order."""
        for rule, hits in zip(rules, matched):
            if rule.freeze is not None:
                (self.freeze if rule.freeze else self.unfreeze)(list(hits))

    def unfreeze(self, names: list) -> None:
        """Give whole parameters back their previous ``grad_req`` and drop their masks."""
        for name in names:
            self._masks.pop(name, None)
            if name in self._grad_req:
                self._kept.discard(name)
                self._params[name].grad_req = self._grad_req.pop(name)
        self._set_frozen_grad_req()
        self._update_held()

    def _set_frozen_grad_req(self) -> None:
        """``grad_req='null'`` for each frozen parameter, except ``'write'`` for a FullyConnected weight whose bias
        is trainable (MXNet would not compute that bias's gradient otherwise); those are kept in ``_kept``."""
        for name in self._grad_req:
            bias = self._fc_bias.get(name)
            keep = bias is not None and bias not in self._grad_req and self._params[bias].grad_req != "null"
            (self._kept.add if keep else self._kept.discard)(name)
            self._params[name].grad_req = "write" if keep else "null"

    @contextlib.contextmanager
    def excluded(self):
        """Within the block, frozen parameters that keep a gradient buffer read ``grad_req == 'null'``.

        Gluon's Trainer decides by ``param.grad_req`` what to push, pull and update (and which gradients must be
        fresh); the private ``_grad_req`` is set, not the property, which would drop the gradient buffer and detach
        the data. Restored on exit, also on error.
        """
        kept = [self._params[name] for name in self._kept]
        for param in kept:
            param._grad_req = "null"
        try:
            yield
        finally:
            for param in kept:
                param._grad_req = "write"

    def set_mask(self, name: str, mask) -> None:
        """Freeze the elements of ``name`` where ``mask`` is 1 (replacing an earlier mask)."""
        self._masks[name] = _Mask(self._checked_mask(name, mask))

    def _checked_mask(self, name: str, mask) -> np.ndarray:
        """The mask as a numpy array of 0/1 after checking its type, shape and values."""
        param = self._params[name]
        if param._deferred_init or not param.shape or 0 in param.shape:
            raise MaskError(f"Parameter {name!r} has no shape yet (deferred initialisation, shape {param.shape}); "
                            f"pass one batch through the network first, then freeze({name!r}, mask=...).")
        if name in self._grad_req:
            raise MaskError(f"Parameter {name!r} is frozen whole, so an element mask would change nothing; call "
                            f"trainer.unfreeze({name!r}) first, then freeze({name!r}, mask=...).")
        if not isinstance(mask, (np.ndarray, nd.NDArray, list, tuple)):
            raise MaskError(f"mask for {name!r} must be a numpy array or NDArray of 0/1, got "
                            f"{type(mask).__name__}; pass e.g. np.zeros({param.shape}).")
        values = mask.asnumpy() if isinstance(mask, nd.NDArray) else np.asarray(mask)
        if values.shape != tuple(param.shape):
            raise MaskError(f"mask for {name!r} must have the parameter's shape {tuple(param.shape)}, got "
                            f"{values.shape}; build it with the parameter's shape (1 = frozen element).")
        if not np.isin(values, (0, 1)).all():
            raise MaskError(f"mask for {name!r} must hold only 0 and 1 (1 = frozen element), got values such as "
                            f"{np.unique(values[~np.isin(values, (0, 1))])[:3]}; threshold or cast it first.")
        return values.astype(np.float32)

    def _update_held(self) -> None:
        """Hold the statistics of norm layers whose trainable parameters are all frozen; release the others."""
        want = {prefix for prefix, layer in self._layers.items()
                if prefix not in self._no_hold and all(name in self._grad_req for name in layer.trainable)}
        for prefix in set(self._held) - want:
            del self._held[prefix]
        for prefix in want - set(self._held):
            self._held[prefix] = [_held_copy(self._params[name]) for name in self._layers[prefix].stats]

    # ------------------------------------------------------------------------------------------ around updates
    def before_update(self, params: list, updaters: list, on_kvstore: bool) -> list:
        """Copy the weights and optimizer states of masked parameters (per context) before the update loop."""
        if not self._masks or on_kvstore:
            return []
        saved = []
        for index, param in enumerate(params):
            mask = self._masks.get(param.name)
            if mask is None or param.grad_req == "null":
                continue
            for pos, updater in enumerate(updaters):
                saved += _snapshot(_getters(updater, index, param, pos), mask)
        return saved

    @staticmethod
    def align_num_update(optimizers: list) -> None:
        """Set each optimizer's global step to 1 + the largest per-parameter count before an update round.

        MXNet raises ``num_update`` (the step ``lr_scheduler`` reads) to each parameter's count as it updates it. A
        parameter that was frozen lags behind, and when it is updated before the others (no aggregation) it would
        read the schedule one step late for the rest of training. Idempotent; equal to stock when counts agree.
        """
        for optimizer in optimizers:
            counts = [c for table in optimizer._all_index_update_counts.values() for c in table.values()]
            if counts:
                optimizer.num_update = max(optimizer.num_update, 1 + max(counts))

    def after_update(self, saved: list) -> None:
        """Restore masked elements and held norm statistics after the update."""
        _restore(saved)
        for held in self._held.values():
            for stat in held:
                stat.restore()

    def wrap_kvstore(self, kvstore, names: list) -> None:
        """Route a local kvstore's updates through ``_MaskingUpdater`` (update_on_kvstore=True)."""
        updater = getattr(kvstore, "_updater", None) if kvstore is not None else None
        if updater is not None and not isinstance(updater, _MaskingUpdater):
            kvstore._set_updater(_MaskingUpdater(updater, self, names))

    # ------------------------------------------------------------------------------------------- save / load
    def explain_columns(self, names: list, rules, matched) -> dict:
        """name -> {frozen, masked, depth} for ``LrTrainer.explain``: depth is that of the last layer_decay rule."""
        columns = {name: {"frozen": name in self.frozen, "masked": self.masked_elements.get(name, 0), "depth": None}
                   for name in names}
        for rule, hits in zip(rules, matched):
            if getattr(rule, "depth", None) is not None:
                for name in hits:
                    columns[name]["depth"] = rule.depth
        return columns

    def records(self) -> dict:
        """name -> {frozen, mask, hold_norm_stats} for a states file (JSON-ready; masks as packed bits, base64)."""
        no_hold = {name for prefix in self._no_hold for name in self._layers[prefix].trainable}
        return {name: {"frozen": name in self._grad_req, "mask": _encode(self._masks[name].values)
                       if name in self._masks else None, "hold_norm_stats": name not in no_hold}
                for name in self._names}

    def check_records(self, records: list, source: str) -> None:
        """Raise StatesFileError unless a states file's freeze fields (``frozen``, ``hold_norm_stats``, ``mask``) fit
        this trainer's parameters; nothing changes (``load_records`` applies them after this)."""
        for record in records:
            name = record["name"]
            for flag in ("frozen", "hold_norm_stats"):
                if flag in record and not isinstance(record[flag], bool):
                    raise StatesFileError(f"States file {source!r}: {name!r}.{flag} must be true or false, got "
                                          f"{record[flag]!r:.40}; the file is damaged: save the states again.")
            if name not in self._params or not record.get("mask"):
                continue
            param = self._params[name]
            try:
                mask = _decode(record["mask"], param.shape)
            except (ValueError, TypeError) as exc:  # not base64, or too few bits for the shape
                raise StatesFileError(f"States file {source!r}: the mask of {name!r} cannot be read ({exc}); the "
                                      f"file is damaged or the parameter's shape changed: save the states again.") \
                    from None
            if mask.size != int(np.prod(param.shape)):
                raise StatesFileError(f"States file {source!r}: the mask of {name!r} has {mask.size} elements, the "
                                      f"parameter {tuple(param.shape)}; load states saved from this model.")

    def load_records(self, records: list) -> None:
        """Re-apply the freeze state of a states file's parameter records (by name; other names are skipped)."""
        saved = {r["name"]: r for r in records if r["name"] in self._params}
        if not any("frozen" in r for r in saved.values()):
            return  # a file written without freeze information leaves the freeze state as it is
        self.unfreeze([n for n in self._names if n in self._grad_req or n in self._masks])
        self.freeze([n for n, r in saved.items() if r.get("frozen")])
        self._no_hold = {prefix for prefix, layer in self._layers.items()
                         if any(not saved.get(n, {}).get("hold_norm_stats", True) for n in layer.trainable)}
        self._update_held()
        for name, record in saved.items():
            if record.get("mask"):
                self.set_mask(name, _decode(record["mask"], self._params[name].shape))


def _encode(values: np.ndarray) -> str:
    """A 0/1 mask as base64 of its packed bits."""
    return base64.b64encode(np.packbits(values.astype(np.uint8).ravel()).tobytes()).decode("ascii")


def _decode(text: str, shape: tuple) -> np.ndarray:
    """The inverse of ``_encode`` for a parameter of ``shape``."""
    bits = np.unpackbits(np.frombuffer(base64.b64decode(text, validate=True), dtype=np.uint8))
    return bits[:int(np.prod(shape))].reshape(shape)
