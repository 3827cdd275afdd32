"""``FusedUpdate``: the fast update path of one LrTrainer, choosing a back-end per flat group."""
import time
import warnings

import mxnet as mx
import numpy as np

from mxformats.optimizer_state import state_arrays
from .base import (Group, Member, kvstore_may_update, pack, param_float32, qualifies, reinstall, state_signature,
                   wait_to_write)
from .compiled import compiled_kernel, compiled_update
from .mxnet_ops import MX_KERNELS
from .numpy_ops import NUMPY_KERNELS, numpy_applies, numpy_update


#: Stock Gluon's message for a stale gradient (kept word for word, the error type too).
_STALE = ("Gradient of Parameter `%s` on context %s has not been updated by backward since last `step`. This could "
          "mean a bug in your model that made it only use a subset of the Parameters (Blocks) for this iteration. "
          "If you are intentionally only using a subset, call step with ignore_stale_grad=True to suppress this "
          "warning and skip updating of Parameters with stale gradient")


class FusedUpdate:
    """The fast update path of one trainer: ``prepare()`` before the step, ``apply()`` in place of the stock loop.

    ``prepare()`` and ``regrad()`` may replace Parameter arrays and updater states by views (they pack new flat
    buffers); LrTrainer calls ``prepare()`` at the start of ``allreduce_grads`` and ``update``, and ``regrad()`` right
    after ``freeze``/``unfreeze``/``load_states`` changed a ``grad_req``. ``apply()`` never replaces an array; it
    returns False, having changed nothing, when the fast path does not apply, and the caller then runs the stock loop.

    Which arrays may be replaced when (the contract with ``hybridize(static_alloc=True, static_shape=True)``): such a
    graph binds the gradient arrays at its first backward and keeps writing them, also after ``Parameter._grad`` was
    replaced, until its gradient requests change; then the next backward binds the arrays the Parameters hold at that
    moment (MXNet 1.9.1 ``CachedOp::StaticBackward``; ``tests/gluon_lr/test_fused.py`` checks both halves). So:

    - a parameter's arrays are replaced by views once, when it is first packed: when the trainer is built, at the first
      update (what was not packed then, checked by ``_bound_elsewhere``), or in ``regrad()``;
    - a parameter whose ``grad_req`` becomes ``'null'`` (MXNet drops its gradient array and detaches its data, which
      stays in the flat buffer) keeps its place, dormant; the others keep their views, untouched;
    - ``regrad()`` re-installs the views of exactly the parameters whose ``grad_req`` just left ``'null'`` (or packs
      them, if never packed), before the next backward, which rebinds them because their requests changed;
    - arrays replaced behind the trainer's back after the first update (``grad_req`` set directly,
      ``initialize(force_reinit=True)``) are never replaced again: those parameters go to the stock Updater, in the
      same step, with the same state arrays (``_live``).
    """

    def __init__(self, trainer):
        self._trainer = trainer
        self._groups = {}
        self._disabled = False
        self._checks_left = 0
        self._updated = False

    def names(self) -> tuple:
        """Names of the parameters on the fast path now (packed, live, trainable, and the step can take the path)."""
        if not self.usable():
            return ()
        indices = sorted({m.index for k, groups in self._groups.items() for group in groups for m in group.members
                          if m.param.grad_req != "null" and self._live(k, m)})
        return tuple(self._trainer._params[i].name for i in indices)

    def usable(self) -> bool:
        """Whether this step can take the fast path at all (see the module docstring for the fallbacks)."""
        trainer = self._trainer
        if not trainer._kv_initialized or (trainer._kvstore and trainer._update_on_kvstore):
            return False
        return self._kernels_exist()

    def _kernels_exist(self) -> bool:
        """No AMP loss scaler, no numpy-array mode, and a fast kernel for every updater's optimizer."""
        trainer = self._trainer
        if self._disabled or getattr(trainer, "_amp_loss_scaler", None) is not None or mx.util.is_np_array():
            return False
        return all(type(updater.optimizer) in MX_KERNELS for updater in trainer._updaters)

    def _packable(self) -> bool:
        """Whether packing pays now: the step takes the fast path, or (kvstore not created yet) it is expected to."""
        if self._trainer._kv_initialized:
            return self.usable()
        return self._kernels_exist() and not kvstore_may_update(self._trainer)

    def prepare(self, early: bool = False) -> None:
        """Re-sync states replaced by ``load_states``; until the first update, pack what qualifies and is not packed.

        Args:
            early: Called from the trainer's constructor: float16 master copies are left to the first step (they
                copy the weights as they are then).
        """
        if self._disabled or not self._packable():
            return
        trainer = self._trainer
        for k, (ctx, updater) in enumerate(zip(trainer._contexts, trainer._updaters)):
            groups = self._groups.setdefault(k, [])
            self._resync(k, groups, updater)
            if self._updated:
                continue  # a graph may have bound the arrays by now: see the class docstring
            packed = {m.index for group in groups for m in group.members}
            wanted = [(i, p) for i, p in enumerate(trainer._params) if i not in packed
                      and qualifies(p, k, updater.optimizer) and not (early and np.dtype(p.dtype) == np.float16)]
            if wanted:
                groups += self._build(k, ctx, updater, wanted)
                self._checks_left = 2

    def regrad(self, params: list) -> None:
        """Follow a ``grad_req`` change of ``params`` made just now, before any backward (see the class docstring).

        Parameters that left ``'null'`` get their views back (values copied in) or, if never packed, new flat groups
        (float32 and float64 only: float16 master copies are made from the weights at the update, as stock).
        Parameters that became ``'null'`` stay dormant in their groups.
        """
        params = [p for p in params if p.grad_req != "null"]
        if self._disabled or not params or not self._packable():
            return
        trainer = self._trainer
        index = {id(p): i for i, p in enumerate(trainer._params)}
        for k, (ctx, updater) in enumerate(zip(trainer._contexts, trainer._updaters)):
            groups = self._groups.get(k)
            if groups is None:
                continue  # nothing packed yet: prepare() packs at the first step
            members = {id(m.param): m for group in groups for m in group.members}
            new = []
            for param in params:
                if id(param) in members:
                    reinstall(k, members[id(param)])
                elif qualifies(param, k, updater.optimizer) and np.dtype(param.dtype) != np.float16:
                    new.append((index[id(param)], param))
            for group in self._build(k, ctx, updater, new) if new else ():
                for m in group.members:
                    m.old = None  # nothing bound the replaced arrays (see the class docstring)
                groups.append(group)

    def _resync(self, k: int, groups: list, updater) -> None:
        """Copy states replaced by ``load_states`` into the views and re-install them (where the structure fits)."""
        for group in groups:
            for m in group.members:
                state = updater.states.get(m.index)
                if state is m.state:
                    continue
                if state is None:
                    state = updater.optimizer.create_state_multi_precision(m.index, m.weight)
                if state_signature(state) != state_signature(group.template):
                    continue  # left to the stock Updater with the loaded state (``_live`` is False)
                for view, leaf in zip(state_arrays(m.state), state_arrays(state)):
                    leaf.copyto(view)
                updater.states[m.index], updater.states_synced[m.index] = m.state, True

    def _build(self, k: int, ctx, updater, wanted: list) -> list:
        """New flat groups on context ``k`` for ``wanted`` [(index, param)], states created where missing."""
        buckets = {}
        for index, param in wanted:
            data = param._data[k]
            if index not in updater.states:
                updater.states[index] = updater.optimizer.create_state_multi_precision(index, data)
            elif not updater.states_synced.get(index, True):
                updater.states[index] = updater.sync_state_context(updater.states[index], ctx)
            updater.states_synced[index] = True
            state = updater.states[index]
            signature = state_signature(state)
            if signature is None or any(leaf.size != data.size for leaf in state_arrays(state)):
                continue
            buckets.setdefault((np.dtype(data.dtype).name, signature), []).append((index, param))
        return [pack(ctx, k, entries, updater) for entries in buckets.values()]

    def apply(self, ignore_stale_grad: bool = False) -> bool:
        """One update of every parameter, as ``gluon.Trainer._update`` would; False (nothing done) if not applicable.

        Raises:
            UserWarning: a gradient is stale and ``ignore_stale_grad`` is False (stock Gluon's error, same text).
        """
        trainer = self._trainer
        if not any(self._groups.values()) or not self.usable():
            return False
        bound = self._bound_elsewhere() if self._checks_left else []
        if bound:
            self._unpack(bound)
            return False
        for param in trainer._params:
            if param.grad_req != "null" and not ignore_stale_grad:
                for data in param._check_and_get(param._data, list):
                    if not data._fresh_grad:
                        raise UserWarning(_STALE % (param.name, str(data.context)))
        for k, updater in enumerate(trainer._updaters):
            self._update_context(k, updater, ignore_stale_grad)
        self._updated = True
        return True

    def _bound_elsewhere(self) -> list:
        """(context, member) pairs whose gradient array replaced at packing was written by backward since (a
        static_alloc graph had bound it). Checked on the first two updates after packing; the replaced arrays are
        released afterwards."""
        self._checks_left -= 1
        members = [(k, m) for k, groups in self._groups.items() for group in groups for m in group.members]
        bound = [(k, m) for k, m in members if m.old is not None and not np.array_equal(m.old[1].asnumpy(), m.old[2])]
        if not self._checks_left and not bound:
            for _, m in members:
                m.old = None
        return bound

    def _unpack(self, bound: list) -> None:
        """Give the ``bound`` members their original arrays back (weights copied in); leave the fast path for good.

        The other members keep their views as ordinary arrays: those are what their graphs write (e.g. parameters
        packed when the trainer was built, before the graph existed, beside deferred ones packed at the first update).
        """
        warnings.warn("LrTrainer: a static_alloc graph (hybridize(static_alloc=True)) was built before the fast "
                      "update path packed the parameters, so backward writes the original gradient arrays; the "
                      "stock update loop runs from now on. Build the trainer before the first forward (with "
                      "initialized, not deferred, parameters) to keep the fast path.")
        for k, m in bound:
            if self._live(k, m, states=False):
                old_data, old_grad, _ = m.old
                m.weight.copyto(old_data)
                m.param._data[k], m.param._grad[k] = old_data, old_grad
                old_data._fresh_grad = m.weight._fresh_grad
        self._groups, self._disabled = {}, True

    def _live(self, k: int, m: Member, states: bool = True) -> bool:
        """Whether member ``m`` is updated here on context ``k``: its Parameter and Updater still use its views."""
        param = m.param
        if param._data is None or param._grad is None or param._data[k] is not m.weight or param._grad[k] is not m.grad:
            return False
        return not states or self._trainer._updaters[k].states.get(m.index) is m.state

    def _update_context(self, k: int, updater, ignore_stale_grad: bool) -> None:
        """Update every parameter's copy on context ``k``: flat runs first, the rest through the stock Updater."""
        fused = {m.index for group in self._groups.get(k, ()) for m in group.members if self._live(k, m)}
        todo = []
        for i, param in enumerate(self._trainer._params):
            if param.grad_req == "null":
                continue
            data = param._data[k]
            if not ignore_stale_grad or data._fresh_grad:
                todo.append(i)
                data._fresh_grad = False
        optimizer = updater.optimizer
        device_counts = optimizer._all_index_update_counts.get(self._trainer._contexts[k].device_id, {})
        counts = {device_counts.get(i, optimizer.begin_num_update) for i in todo}
        if optimizer.lr_scheduler is not None and len(counts) > 1:
            fused = set()
        rest = [i for i in todo if i not in fused]
        if rest:
            params = self._trainer._params
            updater(rest, [params[i]._grad[k] for i in rest], [params[i]._data[k] for i in rest])
        now = [i for i in todo if i in fused]
        if now:
            self._run_fused(k, optimizer, now)

    def _run_fused(self, k: int, optimizer, indices: list) -> None:
        """Count, resolve lr/wd exactly as the optimizer does, then one kernel per run of equal (lr, wd)."""
        optimizer._set_current_context(self._trainer._contexts[k].device_id)
        optimizer._update_count(indices)
        kernel, adjust = MX_KERNELS[type(optimizer)]
        lrs, wds = optimizer._get_lrs(indices), optimizer._get_wds(indices)
        if adjust is not None:
            lrs = [adjust(optimizer, i, lr) for i, lr in zip(indices, lrs)]
        values = dict(zip(indices, zip(lrs, wds)))
        for group in self._groups[k]:
            runs = _runs(group, values)
            if runs:
                _update_group(group, optimizer, kernel, runs)


def _update_group(group: Group, optimizer, kernel, runs: list) -> None:
    """Update the ``runs`` [(start, stop, lr, wd)] of one flat group: with the compiled kernel where one applies (CPU,
    float32/float64), else with the faster of the numpy and MXNet implementations (``Choice``), else MXNet's."""
    compiled = compiled_kernel(optimizer, group)
    if compiled is not None:
        wait_to_write([group.weight, group.grad] + group.slots)
        return compiled_update(compiled, group, optimizer, runs)
    option, timing = group.choice.next(("numpy", "mxnet") if numpy_applies(optimizer, group) else ("mxnet",))
    if timing:
        wait_to_write([group.weight, group.grad] + group.slots)
    start = time.perf_counter()
    if option == "numpy":
        wait_to_write([group.weight, group.grad] + group.slots)
        consts, chunk_fn, _ = NUMPY_KERNELS[type(optimizer)]
        arrays = group.numpy()
        numpy_update(chunk_fn, consts(optimizer), [([a[lo:hi] for a in arrays], param_float32(lr), param_float32(wd))
                                                    for lo, hi, lr, wd in runs])
    else:
        for lo, hi, lr, wd in runs:
            kernel(optimizer, group.weight[lo:hi], group.grad[lo:hi], [slot[lo:hi] for slot in group.slots],
                   lr, wd, group.dtype == np.float16)
    if timing:
        group.weight.wait_to_read()
        group.choice.record(option, time.perf_counter() - start)


def _runs(group: Group, values: dict) -> list:
    """[(start, stop, lr, wd)]: maximal runs of consecutive members updated now with equal (lr, wd)."""
    runs = []
    for m in group.members:
        value = values.get(m.index)
        if value is None:
            continue
        if runs and runs[-1][1] == m.offset and runs[-1][2:] == value:
            runs[-1] = (runs[-1][0], m.offset + m.size) + value
        else:
            runs.append((m.offset, m.offset + m.size) + value)
    return runs
