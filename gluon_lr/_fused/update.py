"""``FusedUpdate``: the fast update path of one LrTrainer, routing each parameter and choosing a back-end per table."""
import time

import mxnet as mx
import numpy as np
from mxnet import nd

from mxformats.optimizer_state import state_arrays

from .base import UNSET, Choice, kvstore_may_update, parse_floats, wait_all
from .compiled import compiled_applies, compiled_update, load_kernels
from .mxnet_ops import MX_KERNELS
from .numpy_ops import numpy_applies, numpy_table_update
from .table import FAST, NOT_UPDATED, Route, Table, route, state_key

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
    bias correction). The others go to the stock Updater in the same step, with the same state arrays.

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
        self._routes = {}  # (context index, parameter index) -> Route
        self._kernels = UNSET

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
        for param in trainer._params:
            if param.grad_req != "null" and not ignore_stale_grad:
                for data in param._check_and_get(param._data, list):
                    if not data._fresh_grad:
                        raise UserWarning(_STALE % (param.name, str(data.context)))
        for k, updater in enumerate(trainer._updaters):
            self._update_context(k, updater, ignore_stale_grad)
        return True

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

    def _update_context(self, k: int, updater, ignore_stale_grad: bool) -> None:
        """Update every parameter's copy on context ``k``: the tables first, the rest through the stock Updater."""
        todo = []
        for i, param in enumerate(self._trainer._params):
            if param.grad_req == "null":
                continue
            data = param._data[k]
            if not ignore_stale_grad or data._fresh_grad:
                todo.append(i)
                data._fresh_grad = False
        optimizer = updater.optimizer
        if _schedule_blocks(self._trainer, k, optimizer, todo):
            tables, rest = [], todo
        else:
            tables, rest = self._tables(k, updater, todo)
        if tables:
            self._run(k, optimizer, tables)
        if rest:
            params = self._trainer._params
            updater(rest, [params[i]._grad[k] for i in rest], [params[i]._data[k] for i in rest])

    def _tables(self, k: int, updater, todo: list) -> tuple:
        """(tables, rest): the parameters of ``todo`` on context ``k`` grouped into tables, and the indices left to
        the stock Updater. States are created (or moved to the context) first, as the Updater does."""
        tables, rest, ctx = {}, [], self._trainer._contexts[k]
        for i in todo:
            param = self._trainer._params[i]
            known = self._routes.get((k, i))
            if known is None or not known.holds(param, k, updater):
                known = self._routes[(k, i)] = Route(k, i, param, updater)
            if known.key is None:
                rest.append(i)
                continue
            if known.key not in tables:
                tables[known.key] = Table(ctx, *known.key)
            tables[known.key].add(i, known.weight, known.grad, known.slots, known.size)
        return list(tables.values()), rest

    def _run(self, k: int, optimizer, tables: list) -> None:
        """Count, resolve lr/wd exactly as the optimizer does, then one back-end launch per table."""
        optimizer._set_current_context(self._trainer._contexts[k].device_id)
        indices = [t.index for table in tables for t in table.tensors]
        optimizer._update_count(indices)
        kernel, adjust = MX_KERNELS[type(optimizer)]
        base_lrs, wds = optimizer._get_lrs(indices), optimizer._get_wds(indices)
        lrs = base_lrs if adjust is None else [adjust(optimizer, i, lr) for i, lr in zip(indices, base_lrs)]
        parsed = type(optimizer) is not mx.optimizer.SGD and self._trainer._contexts[k].device_type == "cpu"
        if parsed:
            parse_floats(lrs + wds)  # what the compiled and numpy kernels need; overlaps a backward still running
        values = dict(zip(indices, zip(lrs, wds)))
        for table in tables:
            for t in table.tensors:
                t.lr, t.wd = values[t.index]
            self._update_table(k, table, optimizer, kernel)
        if parsed and adjust is not None and optimizer.lr_scheduler is None:  # the next step's lr (Adam's t + 1)
            parse_floats([adjust(optimizer, i, lr, ahead=1) for i, lr in zip(indices, base_lrs)], wait=False)

    def _backends(self, table: Table, optimizer) -> tuple:
        """The back-ends that may update ``table``: (``COMPILED``,), (``NUMPY``, ``MXNET_OPS``) (the faster is kept
        after timing both) or (``MXNET_OPS``,)."""
        if compiled_applies(optimizer, table.ctx, table.dtype, table.slot_count):
            if self._kernels is UNSET:
                self._kernels = load_kernels()
            if self._kernels is not None:
                return (COMPILED,)
        return (NUMPY, MXNET_OPS) if numpy_applies(optimizer, table) else (MXNET_OPS,)

    def _choice(self, k: int, table: Table) -> Choice:
        """The timed choice between numpy and MXNet for tables like ``table`` on context ``k``."""
        return self._choices.setdefault((k, table.dtype.name, table.signature), Choice())

    def _update_table(self, k: int, table: Table, optimizer, kernel) -> None:
        """Update one table: with the compiled kernel where one applies (CPU, float32/float64, numba), else with the
        faster of the numpy and MXNet implementations (``Choice``), else with MXNet's operators."""
        options = self._backends(table, optimizer)
        if options == (COMPILED,):
            wait_all()
            return compiled_update(self._kernels, table, optimizer)
        choice = self._choice(k, table)
        option, timing = choice.next(options)
        if option == NUMPY or timing:
            wait_all()
        start = time.perf_counter()
        if option == NUMPY:
            numpy_table_update(optimizer, table)
        else:
            kernel(optimizer, table.tensors, table.dtype == np.float16)
        if timing:
            wait_all()
            choice.record(option, time.perf_counter() - start)


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
