"""LrTrainer: a ``gluon.Trainer`` whose per-parameter lr_mult/wd_mult live in one table that holds everywhere."""
import contextlib
import types
from typing import Mapping

import mxnet as mx
import numpy as np
from mxnet import gluon

from mxformats import validate as _validate
from mxformats.optimizer_state import record_param_names
from mxformats.settings import write_settings

from . import _dist
from . import arguments as _arguments
from . import freeze as _freeze
from . import rules as _rules
from . import _fused
from . import settings as _settings
from . import trainer_states as _states
from .explain import Explanation
from .errors import (MaskError, MultiplierError, ParamsTypeError, SettingsFileError, StatesFileError,
                     UnknownParameterError)

__all__ = ["LrTrainer"]

#: Attributes stored on each Parameter: the multipliers an LrTrainer last applied, and the user's own before that.
_APPLIED, _OWN = "_gluon_lr_applied", "_gluon_lr_own"
#: Optimizers that break at lr 0 (lr_mult 0), and how; freeze such parameters with grad_req='null' instead.
_ZERO_LR_BREAKS = {"ftrl": "sets the weights to 0 (it divides by lr)",
                   "ftml": "makes the weights NaN (it divides by lr)",
                   "sgld": "fails in its noise sampler (scale sqrt(lr) must be > 0)"}
#: MXNet's aggregated ``multi_*`` update operators abort the process with more than 60 tensors in one call.
_MAX_AGGREGATE = 60


def _own_multipliers(param: gluon.Parameter) -> tuple:
    """The Parameter's own (lr_mult, wd_mult): what the user set, not what an earlier LrTrainer applied to it."""
    current = (param.lr_mult, param.wd_mult)
    own = getattr(param, _OWN) if getattr(param, _APPLIED, None) == current else current
    return (_rules.check_multiplier(own[0], f"Parameter {param.name!r}.lr_mult"),
            _rules.check_multiplier(own[1], f"Parameter {param.name!r}.wd_mult"))


class LrTrainer(gluon.Trainer):
    """A ``gluon.Trainer`` that resolves every parameter's lr_mult and wd_mult into one table and applies it.

    Each parameter's multipliers are resolved from, lowest precedence first:

    1. the Parameter's own ``lr_mult``/``wd_mult`` attributes when the trainer is built;
    2. the ``rules``, in order: a later rule overrides an earlier one for the parameters both select;
    3. explicit ``set_lr_mult`` / ``set_wd_mult`` calls (and tables restored by ``load_states``).

    The resolved table is applied as ONE dictionary every time it changes: to each Parameter's attributes (what
    Gluon's optimizer reads through ``param_dict``) and, index-keyed, to the optimizer's ``lr_mult``/``wd_mult``
    tables (what holds where the optimizer has no ``param_dict``: kvstore servers, states files).

    Args:
        params: A Block (or list of Blocks: layer kinds such as ``'depthwise'`` are then known), a ParameterDict,
            a list of ParameterDicts (merged), or a list of Parameters. See ``gluon_lr.rules.collect_params``.
        optimizer: An optimizer name or ``mx.optimizer.Optimizer``, as for ``gluon.Trainer``.
        optimizer_params: Keyword arguments of the optimizer, as for ``gluon.Trainer``.
        kvstore: As for ``gluon.Trainer``. A string with one context and ``update_on_kvstore=True`` works here
            (stock Trainer crashes); the kvstore is then created for that one context.
        compression_params: As for ``gluon.Trainer``.
        update_on_kvstore: As for ``gluon.Trainer``.
        rules: ``gluon_lr.Rule`` objects, applied in order.
        fused: If True (default), take the fast update path (``gluon_lr._fused``: the parameters of a step grouped
            by dtype and state structure, each group updated in one kernel launch that walks a table of per-tensor
            addresses; same results as the stock loop). Every array stays the one MXNet made (nothing is repacked,
            no view is installed). Where it does not apply (update_on_kvstore, AMP, optimizers other than
            sgd/nag/adam/rmsprop/adagrad) the stock loop runs; a parameter it cannot take (sparse, float16 without
            ``multi_precision``, integer dtypes) gets the stock update in the same step. ``explain()`` shows each
            parameter's path.

    Raises:
        ParamsTypeError: ``params``, ``rules``, ``optimizer`` or ``optimizer_params`` hold something of the wrong
            type, or ``fused`` is not a bool.
        UnknownOptimizerError: no MXNet optimizer has that name (the nearest registered names are listed).
        HyperparameterError: an optimizer argument the optimizer does not take, or out of its range.
        DuplicateParameterError: two different Parameters share a name.
        RuleMatchError: a rule selects nothing, or selects by a kind that needs the Block.
        MultiplierError: a Parameter carries an invalid lr_mult/wd_mult, or lr_mult is 0 under FTRL, FTML or SGLD
            (they break at lr 0: freeze with grad_req='null' instead).
        KVStoreConfigError: ``kvstore`` is not a kvstore name, KVStore or None; ``compression_params`` not a dict;
            ``update_on_kvstore`` not a bool; or ``update_on_kvstore=True`` with ``kvstore=None``. Every argument
            is checked before the trainer or any Parameter changes.

    Examples:
        >>> net = mx.gluon.model_zoo.vision.resnet18_v1(classes=10)
        >>> net.initialize()
        >>> trainer = LrTrainer(net, "sgd", {"learning_rate": 0.1, "momentum": 0.9},
        ...                     rules=[Rule("*", lr_mult=0.1), Rule("resnetv10_dense0_*", lr_mult=1.0),
        ...                            Rule("norm", wd_mult=0.0), Rule("bias", wd_mult=0.0)])
        >>> trainer.set_lr_mult({"resnetv10_conv0_weight": 0.0})
        >>> print(trainer.explain())

    Note:
        Change multipliers with ``set_lr_mult``/``set_wd_mult``: a direct edit of ``Parameter.lr_mult`` after the
        trainer is built is overwritten the next time the table is applied, and never reaches kvstore servers.
        Mixed float16 parameters with ``multi_precision=True`` keep float32 master weights (MXNet's behaviour).

    The trainer keeps the table and the ``gluon.Trainer`` overrides; its collaborators do the rest: ``rules``
    (resolution), ``freeze.Freezer`` (frozen parameters, element masks, held norm statistics; every update passes
    through its before/after hooks), ``_fused.FusedUpdate`` (the fast update path, which reads every array
    anew at each update), ``_dist`` (the table and states on dist kvstore servers), ``settings`` and ``trainer_states``
    (the files).
    """

    def __init__(self, params, optimizer, optimizer_params=None, kvstore="device", compression_params=None,
                 update_on_kvstore=None, rules=(), fused=True):
        if not isinstance(rules, (list, tuple)):
            raise ParamsTypeError(f"rules must be a list of gluon_lr.Rule, got {type(rules).__name__}; "
                                  f"pass e.g. rules=[Rule('*_bias', wd_mult=0.0)].")
        if not isinstance(fused, bool):
            raise ParamsTypeError(f"LrTrainer(fused=...) must be True or False, got {type(fused).__name__} "
                                  f"{fused!r:.40}; pass fused=False to always run the stock update loop.")
        _arguments.check_optimizer(optimizer, optimizer_params)
        _arguments.check_kvstore(kvstore, compression_params, update_on_kvstore)
        param_list, kinds = _rules.collect_params(params)
        matched = _rules.match_rules(rules, kinds)
        base = {p.name: _own_multipliers(p) for p in param_list}
        super().__init__(param_list, optimizer, optimizer_params, kvstore, compression_params, update_on_kvstore)
        self._names = [p.name for p in self._params]
        self._kinds = kinds
        self._base = base
        self._rules = tuple(rules)
        self._matched = matched
        self._explicit = {"lr_mult": {}, "wd_mult": {}}
        self._table = self._resolve(self._explicit)
        self._check_table(self._table)
        self._apply_table()
        self._freezer = _freeze.Freezer(self._params, kinds)
        self._freezer.apply_rules(self._rules, self._matched)
        self._fused = _fused.FusedUpdate(self) if fused else None

    # ----------------------------------------------------------------------------------------------- the table
    def set_learning_rate(self, lr) -> None:
        """Set the base learning rate, as ``gluon.Trainer.set_learning_rate``, after checking it.

        Raises:
            HyperparameterError: ``lr`` is not a finite number >= 0 (NaN, infinity, a negative or a string).

        Examples:
            >>> trainer.set_learning_rate(0.01)
        """
        super().set_learning_rate(_validate.check_number(lr, "set_learning_rate(lr)", *_validate.OPTIMIZER_RANGES["learning_rate"]))

    @property
    def lr_mult(self) -> Mapping[str, float]:
        """Read-only mapping name -> resolved lr_mult, in the optimizer's index order."""
        return types.MappingProxyType({name: entry.lr_mult for name, entry in self._table.items()})

    @property
    def wd_mult(self) -> Mapping[str, float]:
        """Read-only mapping name -> resolved wd_mult, in the optimizer's index order."""
        return types.MappingProxyType({name: entry.wd_mult for name, entry in self._table.items()})

    @property
    def fused_params(self) -> tuple:
        """Names of the parameters the fast update path updates; empty where it does not apply.

        Examples:
            >>> trainer.step(batch_size)
            >>> len(trainer.fused_params) == len(trainer.lr_mult)  # every trainable float32 parameter
        """
        return self._fused.names() if self._fused is not None else ()

    @property
    def rules(self) -> tuple:
        """The rules given to the constructor, in order."""
        return self._rules

    def set_lr_mult(self, lr_mult: Mapping[str, float], replace: bool = False) -> None:
        """Set explicit learning-rate multipliers; they override rules and Parameter attributes.

        Args:
            lr_mult: name -> multiplier (finite, >= 0). Names are the trainer's parameter names.
            replace: If True, clear earlier explicit lr multipliers first (rules and attributes stay).
                If False (default), earlier calls are kept: ``set_lr_mult({'a': .1}); set_lr_mult({'b': .1})``
                keeps both.

        Raises:
            ParamsTypeError: ``lr_mult`` is not a mapping with string keys.
            UnknownParameterError: a name is not one of the trainer's parameters (the nearest names are listed).
            MultiplierError: a value is negative, NaN, infinite or not a number; or 0 under FTRL, FTML, SGLD. On
                any error the table is left exactly as it was.

        Examples:
            >>> trainer.set_lr_mult({"dense0_weight": 10.0, "dense0_bias": 10.0})
        """
        self._set_explicit("lr_mult", lr_mult, _validate.check_bool(replace, "set_lr_mult(replace=...)"))

    def set_wd_mult(self, wd_mult: Mapping[str, float], replace: bool = False) -> None:
        """Set explicit weight-decay multipliers; they override rules and Parameter attributes.

        Args:
            wd_mult: name -> multiplier (finite, >= 0).
            replace: If True, clear earlier explicit wd multipliers first; if False (default) keep them.

        Raises:
            ParamsTypeError: ``wd_mult`` is not a mapping with string keys.
            UnknownParameterError: a name is not one of the trainer's parameters (the nearest names are listed).
            MultiplierError: a value is negative, NaN, infinite or not a number. On any error the table is left
                exactly as it was.

        Examples:
            >>> trainer.set_wd_mult({"dense0_bias": 0.0})
        """
        self._set_explicit("wd_mult", wd_mult, _validate.check_bool(replace, "set_wd_mult(replace=...)"))

    def _set_explicit(self, field: str, values: Mapping[str, float], replace: bool, source: str = "") -> None:
        """Validate ``values`` completely, then resolve and apply the new table (all or nothing)."""
        checked = self._checked_values(f"set_{field}", values, field)
        explicit = {key: dict(table) for key, table in self._explicit.items()}
        if replace:
            explicit[field].clear()
        explicit[field].update({name: (value, source or f"set_{field}") for name, value in checked.items()})
        table = self._resolve(explicit)
        self._check_table(table)
        self._explicit, self._table = explicit, table
        self._apply_table()

    def _checked_values(self, what: str, values, field: str) -> dict:
        """name -> float after checking the mapping's type, every name and every value."""
        if not isinstance(values, Mapping) or not all(isinstance(k, str) for k in values):
            raise ParamsTypeError(f"{what} expects a mapping of parameter name (str) -> float, got "
                                  f"{type(values).__name__} {values!r:.80}; pass e.g. {{'{self._names[0]}': 0.1}}.")
        unknown = [name for name in values if name not in self._table]
        if unknown:
            near = {name: _rules.nearest_names(name, self._names)[:3] for name in unknown[:5]}
            raise UnknownParameterError(f"{what}: {len(unknown)} unknown parameter name(s) {unknown[:5]}; this "
                                        f"trainer has {len(self._names)} parameters, nearest names: {near}. "
                                        f"Use names from trainer.{field}.keys().")
        return {name: _rules.check_multiplier(v, f"{what}: {field} of {name!r}") for name, v in values.items()}

    def _resolve(self, explicit) -> dict:
        """The resolved table for the given explicit values (see ``gluon_lr.rules.resolve``)."""
        return _rules.resolve(self._names, self._base, self._rules, self._matched, explicit)

    def _check_table(self, table) -> None:
        """Refuse lr_mult 0 under optimizers that break at lr 0 (FTRL, FTML, SGLD)."""
        name = type(self._optimizer).__name__.lower()
        zeros = [param for param, entry in table.items() if entry.lr_mult == 0 and name in _ZERO_LR_BREAKS]
        if zeros:
            raise MultiplierError(f"lr_mult 0 for {zeros[:5]} under optimizer {name!r}, which {_ZERO_LR_BREAKS[name]}; "
                                  f"freeze these parameters with grad_req='null' instead, or use a small lr_mult.")

    def _apply_table(self) -> None:
        """Push the resolved table everywhere MXNet reads it, as one dictionary each.

        - each Parameter's ``lr_mult``/``wd_mult`` (read first by Gluon's optimizer through ``param_dict``);
        - every optimizer object this trainer holds (its own, its updaters', a local kvstore's), index-keyed via
          ``set_lr_mult``/``set_wd_mult`` with the FULL table, since those calls rebuild the dict from scratch; and
          the parameter names by index (``mxformats.optimizer_state.PARAM_NAMES``), which MXNet pickles with the
          optimizer into states files.
          The index-keyed table is what a dist kvstore server sees: it receives the optimizer pickled without
          ``param_dict`` when the kvstore is initialised (the first step). LATER changes reach dist servers before
          the next push, without resetting their states: ``_dist.sync`` in ``_allreduce_grads``.
        """
        lr = {i: self._table[name].lr_mult for i, name in enumerate(self._names)}
        wd = {i: self._table[name].wd_mult for i, name in enumerate(self._names)}
        for i, param in enumerate(self._params):
            if getattr(param, _APPLIED, None) != (param.lr_mult, param.wd_mult):
                setattr(param, _OWN, (param.lr_mult, param.wd_mult))
            param.lr_mult, param.wd_mult = lr[i], wd[i]
            setattr(param, _APPLIED, (lr[i], wd[i]))
        for optimizer in self._optimizers():
            optimizer.set_lr_mult(dict(lr))
            optimizer.set_wd_mult(dict(wd))
            record_param_names(optimizer, self._names)  # MXNet's states files then say which index is which

    def _optimizers(self) -> list:
        """Every distinct optimizer object this trainer (and a local kvstore) holds."""
        found = [self._optimizer] + [updater.optimizer for updater in self._updaters]
        kvstore = getattr(self, "_kvstore", None)
        kv_updater = getattr(kvstore, "_updater", None) if kvstore else None
        if kv_updater is not None:
            found.append(kv_updater.optimizer)
        unique = {id(optimizer): optimizer for optimizer in found}
        return list(unique.values())

    # ---------------------------------------------------------------------------------- optimizer and kvstore
    def _init_optimizer(self, optimizer, optimizer_params):
        """Create the optimizer as Gluon does, then cap its aggregation size."""
        super()._init_optimizer(optimizer, optimizer_params)
        self._cap_aggregation()

    def _cap_aggregation(self) -> None:
        """Cap ``aggregate_num`` of every optimizer at 60: MXNet's ``multi_*`` updates abort above that."""
        for optimizer in self._optimizers():
            optimizer.aggregate_num = min(optimizer.aggregate_num, _MAX_AGGREGATE)

    def _init_kvstore(self):
        """Create the kvstore as Gluon does, but make one context + kvstore string + update_on_kvstore=True work.

        Stock Gluon drops the kvstore for a single context and then calls ``None.is_capable``; here the kvstore is
        created explicitly for that case. The table is re-applied afterwards (a kvstore may hold the optimizer).
        """
        config = self._kvstore_params
        kvstore = config["kvstore"]
        single = isinstance(kvstore, str) and "dist" not in kvstore and len(self._contexts) == 1
        if single and config["update_on_kvstore"]:
            self._kvstore_params = dict(config, kvstore=mx.kv.create(kvstore))
        try:
            super()._init_kvstore()
        finally:
            self._kvstore_params = config
        self._cap_aggregation()
        self._apply_table()
        if self._update_on_kvstore:
            self._freezer.wrap_kvstore(self._kvstore, self._names)
        _dist.attach(self)  # dist kvstore with update_on_kvstore: install optimizer + table on the servers

    # ------------------------------------------------------------------------------------------------ updates
    def step(self, batch_size, ignore_stale_grad=False) -> None:
        """One optimization step, as ``gluon.Trainer.step``, after checking the arguments.

        Args:
            batch_size: The gradients are scaled by ``1 / batch_size`` (a finite number > 0).
            ignore_stale_grad: As for ``gluon.Trainer.step``.

        Raises:
            HyperparameterError: ``batch_size`` is not a finite number > 0 (a string, 0, a negative, NaN).
            ParamsTypeError: ``ignore_stale_grad`` is not a bool.

        Examples:
            >>> loss.backward(); trainer.step(batch_size=32)
        """
        super().step(_arguments.check_batch_size(batch_size, "step(batch_size)"),
                     _validate.check_bool(ignore_stale_grad, "step(ignore_stale_grad=...)"))

    def update(self, batch_size, ignore_stale_grad=False) -> None:
        """The update half of ``step`` (after ``allreduce_grads``), as ``gluon.Trainer.update``, arguments checked.

        Raises:
            HyperparameterError, ParamsTypeError: as for ``step``.

        Examples:
            >>> trainer.allreduce_grads(); trainer.update(batch_size=32)
        """
        super().update(_arguments.check_batch_size(batch_size, "update(batch_size)"),
                       _validate.check_bool(ignore_stale_grad, "update(ignore_stale_grad=...)"))

    def _update(self, ignore_stale_grad=False):
        """One parameter update: the single place to add a step before or after the stock update loop.

        Subclasses and branches wrap ``self._apply_updates(ignore_stale_grad)`` here (e.g. snapshot weights and
        optimizer state before, restore masked elements after). With ``update_on_kvstore=True`` the weights were
        already updated in ``_allreduce_grads`` (push/pull on the kvstore) and ``_apply_updates`` only checks for
        stale gradients.
        """
        if not self._update_on_kvstore:
            self._freezer.align_num_update(self._optimizers())
        saved = self._freezer.before_update(self._params, self._updaters, bool(self._update_on_kvstore))
        with self._freezer.excluded():
            self._apply_updates(ignore_stale_grad)
        self._freezer.after_update(saved)

    def _allreduce_grads(self):
        """Push (and pull) as Gluon does. With update_on_kvstore=True the kvstore updates in here: align the global
        step first (frozen parameters' counts), send changed lr/wd/multipliers to dist kvstore servers, and leave
        frozen parameters out of the push and pull."""
        if self._update_on_kvstore:
            self._freezer.align_num_update(self._optimizers())
        _dist.sync(self)
        with self._freezer.excluded():
            super()._allreduce_grads()

    def _apply_updates(self, ignore_stale_grad=False):
        """The fast update path where it applies (``gluon_lr._fused``), else the stock Gluon loop."""
      
        if self._fused is None or not self._fused.apply(ignore_stale_grad):
            super()._update(ignore_stale_grad)

    # ------------------------------------------------------------------------------ explain, settings, states
    def explain(self) -> Explanation:
        """Why each parameter has its lr_mult and wd_mult: one row per parameter, in index order.

        Returns:
            An ``Explanation``: ``print()`` it for a table; ``.to_dict()`` gives name -> {shape, kinds, lr_mult,
            lr_source, wd_mult, wd_source, shadowed, update, frozen, masked, depth}. ``update`` is the path the
            parameter's next update takes (``gluon_lr._fused.FusedUpdate.paths``): ``compiled``, ``numpy``,
            ``mxnet-ops``, ``stock:<reason>`` (e.g. ``stock:sparse``, ``stock:float16``, ``stock:fused=False``) or
            ``none`` (not updated).

        Examples:
            >>> print(trainer.explain())
        """
        columns = self._freezer.explain_columns(self._names, self._rules, self._matched)
        with self._freezer.excluded():  # frozen parameters that keep a gradient buffer are not updated either
            paths = self._fused.paths() if self._fused is not None else _fused.stock_paths(self._params)
        for name, path in paths.items():
            columns[name]["update"] = path
        return Explanation.from_table(self._params, self._table, self._kinds, columns)

    def _param_records(self) -> list:
        """Per parameter, in index order, what the settings file holds (name, shape, dtype, multipliers, freezing)."""
        shapes = [param._data[0].shape if param._data is not None else param.shape for param in self._params]
        return [{"name": name, "shape": [int(d) for d in (shape or ())], "dtype": np.dtype(param.dtype).name,
                 "lr_mult": self._table[name].lr_mult, "wd_mult": self._table[name].wd_mult,
                 "frozen": param.grad_req == "null" or name in self._freezer.frozen,
                 "masked_elements": self._freezer.masked_elements.get(name, 0)}
                for name, param, shape in zip(self._names, self._params, shapes)]

    def export_settings(self, path) -> dict:
        """Write the settings file that ``migrate`` reads (format in the README), atomically.

        Args:
            path: Destination JSON file (replaced atomically; never a file this trainer reads).

        Returns:
            The document written.

        Raises:
            SettingsFileError: ``path`` is not a file path (None, empty, a folder or ending in '/'), its folder is
                missing or not writable, or the lr scheduler has no representation in the format. Nothing is written.

        Examples:
            >>> trainer.export_settings("out/settings.json")
            >>> gluon_lr.load_settings("out/settings.json")["optimizer"]["name"]
            'sgd'
        """
        path = _validate.check_output_file(path, "export_settings(path)", SettingsFileError)
        document = _settings.settings_document(self._optimizer, self._param_records(), self._optimizer.num_update,
                                               _settings.device_count(self))
        write_settings(path, document)
        return document

    def save_states(self, fname) -> None:
        """Save the optimizer states (momentum, ...) AND the multiplier table by parameter name, atomically.

        Args:
            fname: Destination file; read it back with ``LrTrainer.load_states``.

        Raises:
            StatesFileError: ``fname`` is not a file path (None, empty, a folder or ending in '/'), or its folder is
                missing or not writable. Nothing is written.

        Examples:
            >>> trainer.save_states("trainer.states")

        Note:
            Stock ``gluon.Trainer.save_states`` drops every lr_mult/wd_mult; this file keeps them.
        """
        _states.save_trainer_states(self, _validate.check_output_file(fname, "save_states(fname)", StatesFileError))

    def load_states(self, fname) -> list:
        """Load a file written by ``save_states``: optimizer states by name, and the multiplier table.

        A multiplier in the file that differs from this trainer's resolution becomes an explicit value with source
        ``load_states`` (``set_lr_mult(..., replace=True)`` clears it). The optimizer object is replaced (MXNet's
        behaviour), so the table is re-applied to the new one.

        Args:
            fname: A file written by ``LrTrainer.save_states``.

        Returns:
            The names in the file that this trainer does not have (their states and multipliers are dropped);
            a warning lists them too.

        Raises:
            StatesFileError: the file is missing, corrupt, foreign (e.g. a stock Trainer states file), lists no
                parameter or none of this trainer's, or a state's shape does not fit the parameter of the same name.
                The trainer is unchanged then.

        Examples:
            >>> missing = trainer.load_states("trainer.states")
        """
        return _states.load_trainer_states(self, _validate.check_path(fname, "load_states(fname)", StatesFileError))

    # ---------------------------------------------------------------------------------------------- freezing
    def freeze(self, select, mask=None, hold_norm_stats: bool = True) -> list:
        """Freeze parameters (or, with ``mask``, elements of one parameter) so that nothing about them changes.

        A frozen parameter gets ``grad_req='null'``: no gradient is computed for it, its value, every optimizer
        state array and its update count stay bit-identical, weight decay does not touch it. The running
        statistics of a norm layer whose trainable parameters are all frozen are held fixed as well (restored at
        every step, also under ``autograd.record(train_mode=True)``) unless ``hold_norm_stats=False``.

        Args:
            select: What to freeze: an exact name, a Rule selector (glob, ``'re:<regex>'``, ``'bias'``, ``'norm'``,
                ...), a Rule, a Parameter, a Block, or a list of those.
            mask: Optional array of 0/1 with the shape of the ONE selected parameter: elements where it is 1 are
                frozen (they and their optimizer state stay bit-identical), the others update as usual. Call again
                with a new mask to change it (every step if you like).
            hold_norm_stats: Hold the running statistics of norm layers whose parameters this call leaves all
                frozen (default True); False lets them run.

        Returns:
            The names frozen (or masked) by this call, in index order.

        Raises:
            ParamsTypeError: ``select`` is of another type.
            UnknownParameterError: a Parameter or Block is not this trainer's.
            RuleMatchError: a selector matches nothing.
            MaskError: ``mask`` does not fit: not 0/1, wrong shape, several parameters selected, the parameter is
                frozen whole, or a dist kvstore updates on its servers.

        Examples:
            >>> trainer.freeze(net.features)                       # the whole backbone
            >>> trainer.freeze("dense0_weight", mask=m)           # only the elements where m == 1

        Note:
            ``lr_mult=0`` does NOT freeze: MXNet's momentum and Adam moments keep moving such a weight.

        Note:
            Freezing a Dense (FullyConnected) weight while its bias stays trainable keeps the weight's gradient
            buffer (``grad_req='write'``) when MXNet is built with MKLDNN (its CPU FullyConnected backward skips the
            bias gradient when the weight needs none, leaving the bias gradient stale). The weight is still frozen
            exactly (value, state, update count; not pushed, not updated), but that layer's backward costs what it
            did unfrozen: one weight-gradient GEMM and a weight-sized buffer. Freeze the bias too to save it.
            Convolution, Deconvolution and norm layers are not affected and get ``grad_req='null'``.
        """
        _validate.check_bool(hold_norm_stats, "freeze(hold_norm_stats=...)")
        names = self._freezer.select(select)
        if mask is None:
            self._freezer.freeze(names, hold_norm_stats)
            return names
        if len(names) != 1:
            raise MaskError(f"freeze(mask=...) needs exactly one parameter, {select!r:.60} selects {len(names)} "
                            f"({names[:3]}...); call freeze(name, mask=m) once per parameter.")
        _dist.refuse_masks(self._kvstore_params)
        self._freezer.set_mask(names[0], mask)
        return names

    def unfreeze(self, select) -> list:
        """Undo ``freeze`` (whole or masked) for the selected parameters; they resume from their kept state.

        Args:
            select: As for ``freeze``.

        Returns:
            The selected names, in index order.

        Raises:
            ParamsTypeError, UnknownParameterError, RuleMatchError: as for ``freeze``.

        Examples:
            >>> trainer.unfreeze(net.features[-1])   # ULMFiT-style: thaw the last stage
        """
        names = self._freezer.select(select)
        self._freezer.unfreeze(names)
        return names

    @contextlib.contextmanager
    def _grad_req_watch(self):
        """A block that changes ``grad_req`` values (``trainer_states`` wraps ``load_records`` in it).

        Nothing needs to follow such a change any more: the fast path (``gluon_lr._fused.FusedUpdate``) replaces no
        array and reads every parameter's arrays anew at each update.
        """
        yield

    @property
    def frozen(self) -> frozenset:
        """Names of the parameters frozen whole by ``freeze``."""
        return self._freezer.frozen

    @property
    def masked_elements(self) -> Mapping[str, int]:
        """Read-only mapping name -> number of frozen elements, for parameters with an element mask."""
        return types.MappingProxyType(self._freezer.masked_elements)
