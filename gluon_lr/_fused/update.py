"""``FusedUpdate``: the fast update path of one LrTrainer, routing each parameter and choosing a back-end per table."""
import operator
import time

import mxnet as mx
import numpy as np
from mxnet import nd

from mxformats.optimizer_state import state_arrays

from .base import UNSET, ArrayCalls, Choice, kvstore_may_update, parse_floats, parse_known, wait_all
from .compiled import compiled_applies, compiled_update, load_array_calls, load_kernels
from .mxnet_ops import MX_KERNELS
from .numpy_ops import numpy_applies, numpy_table_update
from .plan import Plan
from .table import FAST, NOT_UPDATED, Table, route, state_key

#: Back-end names, as ``FusedUpdate.paths`` reports them.
COMPILED, NUMPY, MXNET_OPS = "compiled", "numpy", "mxnet-ops"

#: Stock Gluon's message for a stale gradient (kept word for word, the error type too).
_STALE = ("Gradient of Parameter `%s` on context %s has not been updated by backward since last `step`. This could "
          "mean a bug in your model that made it only use a subset of the Parameters (Blocks) for this iteration. "
          "If you are intentionally only using a subset, call step with ignore_stale_grad=True to suppress this "
          "warning and skip updating of Parameters with stale gradient")


class FusedUpdate:
    """The fast update path of one trainer: ``apply()`` runs in place of the stock update loop.

    No array is replaced, ever: Parameters keep their weight and gradient NDArrays, the Updater its state arrays. Each
    step, per context, the parameters to update are routed (``table.route``, ``table.state_key``); those that qualify
    are grouped by (dtype, state structure) into ``table.Table``s, and each table is updated by one back-end launch
    with every parameter's lr and wd computed exactly as the optimizer computes them (update counts, schedule, Adam's
    bias correction). The others go to the stock Updater in the same step, with the same state arrays. The routing
    and the tables of a context (``plan.Plan``) are kept from step to step while every array and state they were
    made from is still the one the Parameters and the Updater hold.

    Examples:
        >>> fused = FusedUpdate(trainer)
        >>> fused.paths()["dense0_weight"]
        'compiled'
        >>> fused.apply()       # inside trainer._update: False (nothing done) where the stock loop must run
        True
    """

    def __init__(self, trainer):
        self._trainer = trainer
        self._choices = {}  # (context index, dtype name, state signature) -> Choice between numpy and MXNet
        self._routes = {}  # (context index, parameter index) -> table.Route
        self._plans = {}  # context index -> plan.Plan of the last step
        self._kernels = UNSET
        self._calls = ArrayCalls()  # compiled loops once the kernels are loaded
        self._checked = ([], None)  # (arrays, their handles) of the last step's freshness check

    def names(self) -> tuple:
        """Names of the parameters the next update takes through the fast path, in index order."""
        return tuple(name for name, path in self.paths().items() if _is_fast(path))

    def paths(self) -> dict:
        """name -> the path the next update of that parameter takes, in index order.

        Returns:
            Per parameter: ``'compiled'``, ``'numpy'``, ``'mxnet-ops'`` or ``'numpy|mxnet-ops'`` (both timed on the
            first steps, the faster kept) on the fast path; ``'stock:<reason>'`` where the stock Updater (or, for a
            whole step, the stock loop) updates it: ``update_on_kvstore``, ``amp``, ``np-array``,
            ``optimizer=<name>``, ``lr-scheduler``, ``uninitialized``, ``sparse``, ``float16`` (without
            ``multi_precision=True``), a dtype's name, ``state`` (optimizer state of another structure); ``'none'``
            when it is not updated (``grad_req='null'``). Several contexts that differ: ``'<path> (<context>)'``
            joined by ``', '``.
        """
        trainer, reason = self._trainer, self.step_reason()
        trainable = [i for i, p in enumerate(trainer._params) if p.grad_req != "null"]
        reasons = [reason or ("stock:lr-scheduler" if _schedule_blocks(trainer, k, updater.optimizer, trainable)
                              else None) for k, updater in enumerate(trainer._updaters)]
        paths = {}
        for i, param in enumerate(trainer._params):
            found = [self._path(k, updater, i, param, reasons[k]) for k, updater in enumerate(trainer._updaters)]
            paths[param.name] = found[0] if len(set(found)) == 1 else ", ".join(
                f"{path} ({ctx})" for path, ctx in zip(found, trainer._contexts))
        return paths

    def step_reason(self):
        """None when this step can take the fast path, else ``'stock:<reason>'``: the stock loop updates everything."""
        trainer = self._trainer
        if getattr(trainer, "_amp_loss_scaler", None) is not None:
            return "stock:amp"
        if mx.util.is_np_array():
            return "stock:np-array"
        for updater in trainer._updaters:
            if type(updater.optimizer) not in MX_KERNELS:
                return f"stock:optimizer={type(updater.optimizer).__name__.lower()}"
        on_kvstore = (bool(trainer._kvstore and trainer._update_on_kvstore) if trainer._kv_initialized
                      else kvstore_may_update(trainer))
        return "stock:update_on_kvstore" if on_kvstore else None

    def apply(self, ignore_stale_grad: bool = False) -> bool:
        """One update of every parameter, as ``gluon.Trainer._update`` would; False (nothing done) if not applicable.

        Raises:
            UserWarning: a gradient is stale and ``ignore_stale_grad`` is False (stock Gluon's error, same text).
        """
        trainer = self._trainer
        if not trainer._kv_initialized or self.step_reason() is not None:
            return False
        params, contexts = trainer._params, len(trainer._updaters)
        trainable = [i for i, p in enumerate(params) if p.grad_req != "null"]
        arrays = [data for i in trainable for data in params[i]._check_and_get(params[i]._data, list)]
        if len(arrays) != len(trainable) * contexts:  # a parameter not on every context: the stock loop says so
            return False
        handles = self._handles(arrays)
        fresh = self._calls.grad_states(arrays, handles)
        if not ignore_stale_grad and not fresh.all():
            stale = int(np.argmin(fresh))
            raise UserWarning(_STALE % (params[trainable[stale // contexts]].name, str(arrays[stale].context)))
        for k, updater in enumerate(trainer._updaters):
            todo, mine = trainable, slice(k, None, contexts)
            if ignore_stale_grad:
                picked = fresh[mine].nonzero()[0].tolist()
                todo = [trainable[j] for j in picked]
                mine = [k + j * contexts for j in picked]
            weights = _pick(arrays, mine)
            self._calls.clear_grad_states(weights, None if handles is None else handles[mine])
            self._update_context(k, updater, todo, weights)
        return True

    def _handles(self, arrays: list):
        """``self._calls.handles(arrays)``, kept while the step's arrays are the same objects."""
        known, handles = self._checked
        if handles is None or len(known) != len(arrays) or not all(map(operator.is_, known, arrays)):
            self._checked = arrays, self._calls.handles(arrays)
        return self._checked[1]

    def _path(self, k: int, updater, index: int, param, reason) -> str:
        """The path of ``param``'s copy on context ``k`` at the next update (see ``paths``); ``reason`` is why the
        whole step on that context takes the stock loop, or None."""
        if param.grad_req == "null":
            return NOT_UPDATED
        path = reason or route(param, k, updater.optimizer)
        if path != FAST:
            return path
        weight = param._data[k]
        if index in updater.states:  # (moved to the weight's context at the update if it is not there yet)
            state = updater.states[index]
            signature = state_key(state, weight, context=updater.states_synced.get(index, True))
        else:  # created at the update; its structure is known now
            state = updater.optimizer.create_state_multi_precision(index, nd.zeros((1,), weight.context, weight.dtype))
            signature = state_key(state, weight, sizes=False)
        if signature is None:
            return "stock:state"
        table = Table(weight.context, np.dtype(weight.dtype), signature)
        table.add(index, weight, param._grad[k], state_arrays(state), weight.size)
        options = self._backends(table, updater.optimizer)
        best = self._choice(k, table).best if len(options) > 1 else options[0]
        return best or "|".join(options)

    def _update_context(self, k: int, updater, todo: list, weights: list) -> None:
        """Update the copies on context ``k`` of the parameters ``todo`` (``weights``: their weight arrays there,
        their gradients' freshness already cleared): the tables first, the rest through the stock Updater."""
        optimizer, params = updater.optimizer, self._trainer._params
        if _schedule_blocks(self._trainer, k, optimizer, todo):
            plan, rest = None, todo
        else:
            plan = self._plan(k, updater, todo, weights)
            rest = plan.rest
        if plan is not None and plan.tables:
            self._run(k, optimizer, plan)
        if rest:
            updater(rest, [params[i]._grad[k] for i in rest], [params[i]._data[k] for i in rest])

    def _plan(self, k: int, updater, todo: list, weights: list) -> Plan:
        """The last step's plan for context ``k`` if it still holds, else a new one (states are created, or moved to
        the context, first, as the Updater does)."""
        plan = self._plans.get(k)
        if plan is None or not plan.holds(todo, weights, self._trainer._params, updater):
            plan = self._plans[k] = Plan(k, self._trainer._contexts[k], todo, self._trainer._params, updater,
                                         self._routes)
        return plan

    def _run(self, k: int, optimizer, plan: Plan) -> None:
        """Count, resolve lr/wd exactly as the optimizer does, then one back-end launch per table."""
        optimizer._set_current_context(self._trainer._contexts[k].device_id)
        indices = plan.indices
        optimizer._update_count(indices)
        kernel, adjust = MX_KERNELS[type(optimizer)]
        base_lrs, wds = optimizer._get_lrs(indices), optimizer._get_wds(indices)
        lrs = base_lrs if adjust is None else adjust(optimizer, indices, base_lrs)
        parsed = type(optimizer) is not mx.optimizer.SGD and self._trainer._contexts[k].device_type == "cpu"
        if parsed:
            foreseen = parse_known(set(lrs))
            parse_floats(lrs + wds)  # what the compiled and numpy kernels need; overlaps a backward still running
        start = 0
        for table in plan.tables:
            stop = start + len(table.tensors)
            self._update_table(k, table, optimizer, kernel, lrs[start:stop], wds[start:stop])
            start = stop
        if parsed and adjust is not None and optimizer.lr_scheduler is None:
            _parse_ahead(optimizer, adjust, indices, base_lrs, PARSE_AHEAD if foreseen else 1)

    def _backends(self, table: Table, optimizer) -> tuple:
        """The back-ends that may update ``table``: (``COMPILED``,), (``NUMPY``, ``MXNET_OPS``) (the faster is kept
        after timing both) or (``MXNET_OPS``,)."""
        if compiled_applies(optimizer, table.ctx, table.dtype, table.slot_count):
            if self._kernels is UNSET:
                self._kernels = load_kernels()
                if self._kernels is not None:
                    self._calls.use_loops(load_array_calls())
            if self._kernels is not None:
                return (COMPILED,)
        return (NUMPY, MXNET_OPS) if numpy_applies(optimizer, table) else (MXNET_OPS,)

    def _choice(self, k: int, table: Table) -> Choice:
        """The timed choice between numpy and MXNet for tables like ``table`` on context ``k``."""
        return self._choices.setdefault((k, table.dtype.name, table.signature), Choice())

    def _update_table(self, k: int, table: Table, optimizer, kernel, lrs: list, wds: list) -> None:
        """Update one table with its tensors' ``lrs`` and ``wds``: with the compiled kernel where one applies (CPU,
        float32/float64, numba), else with the faster of the numpy and MXNet implementations (``Choice``), else with
        MXNet's operators."""
        options = self._backends(table, optimizer)
        if options == (COMPILED,):
            wait_all()
            return compiled_update(self._kernels, table, optimizer, lrs, wds, self._calls)
        for t, lr, wd in zip(table.tensors, lrs, wds):
            t.lr, t.wd = lr, wd
        choice = self._choice(k, table)
        option, timing = choice.next(options)
        if option == NUMPY or timing:
            wait_all()
        start = time.perf_counter()
        if option == NUMPY:
            numpy_table_update(optimizer, table, self._calls)
        else:
            kernel(optimizer, table.tensors, table.dtype == np.float16)
        if timing:
            wait_all()
            choice.record(option, time.perf_counter() - start)


#: Steps of upcoming lrs that ``_parse_ahead`` has MXNet parse in one batch of operator calls, while forecasts hit.
PARSE_AHEAD = 16


def _parse_ahead(optimizer, adjust, indices: list, base_lrs: list, steps: int) -> None:
    """Have MXNet parse (without waiting) the lrs of the next ``steps`` steps when the next step's are not parsed
    yet: Adam's bias correction makes new values at every step, and where MXNet's engine threads sleep between steps
    the first operator call of a batch costs many times what the next ones do (it wakes them). Only a forecast (one
    index per distinct base lr, the lr and multipliers of now): a value it missed is parsed when the step needs it,
    and the caller asks for one step only after a miss (an lr set at every step makes every forecast miss)."""
    first = {}
    for index, lr in zip(indices, base_lrs):
        first.setdefault(lr, index)
    lrs, sample = list(first), list(first.values())
    if not parse_known(adjust(optimizer, sample, lrs, ahead=1)):
        parse_floats([value for ahead in range(1, steps + 1) for value in adjust(optimizer, sample, lrs, ahead)],
                     wait=False)


def _pick(items: list, where) -> list:
    """``items[where]`` for a slice or a list of positions."""
    return items[where] if isinstance(where, slice) else [items[j] for j in where]


def _schedule_blocks(trainer, k: int, optimizer, indices) -> bool:
    """Whether an lr scheduler meets unequal update counts among ``indices`` on context ``k`` (the stock loop then
    updates them: its lr depends on the order of the updates)."""
    if optimizer.lr_scheduler is None:
        return False
    device_counts = optimizer._all_index_update_counts.get(trainer._contexts[k].device_id, {})
    return len({device_counts.get(i, optimizer.begin_num_update) for i in indices}) > 1


def _is_fast(path: str) -> bool:
    """Whether a ``paths`` value is on the fast path (on at least one context)."""
    return any(not part.startswith("stock:") and not part.startswith(NOT_UPDATED)
               for part in path.split(", "))


def stock_paths(params: list) -> dict:
    """name -> path for a trainer built with ``fused=False``: ``'stock:fused=False'``, or ``'none'`` (not
    updated)."""
    return {p.name: NOT_UPDATED if p.grad_req == "null" else "stock:fused=False" for p in params}
