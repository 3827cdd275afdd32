"""The machinery every exact MXNet optimizer shares: ``MXNetOptimizer`` and the float32 and gradient helpers.

Each exact optimizer (``sgd_family``, ``large_batch``, ``adam_family``, ``adagrad_family``) follows one MXNet 1.9.1
optimizer (``mxnet/optimizer/optimizer.py`` and the kernels in ``src/operator/optimizer_op-inl.h``): gradients are
multiplied by ``rescale_grad`` and clipped elementwise to ``+-clip_gradient``, every per-parameter update count
``step`` is kept, and the hyperparameters that MXNet's kernels take as C ``float`` are the float32 values MXNet parses
from ``str(value)`` (``kernel_float``; ``migrate.optim.dmlc_float``; tuple and array parameters correctly rounded:
``rounded_float32``), so float64 runs agree to ~1e-16 per step.
Where MXNet runs a C++ kernel (sgd, nag, adam, rmsprop, ftrl, signum, lamb and its ``multi_sum_sq`` norms), the
same kernel compiled with numba (``mxupdate.kernels``, shared with LrTrainer's fast step; ``migrate.optim.compiled``)
updates contiguous CPU float32/float64 tensors, bit for bit MXNet's (torch's ``add(alpha=)`` is a fused multiply-add,
MXNet's kernels round each operation). Other tensors (CUDA, strided, half precision), and every tensor of a group
with ``compiled=False``, take torch's multi-tensor ops (``torch._foreach_*`` and torch's fused kernels with adjusted
constants): a few launches per group whatever its tensor count, the same numbers on CPU and CUDA where the ops
allow, within float32 rounding of the compiled kernels.
A group's ``lr`` and ``weight_decay`` are absolute (MXNet's ``schedule(num_update) * lr_mult`` and
``wd * wd_mult``); ``migrate.torch_lr_scheduler`` keeps ``lr`` on MXNet's schedule.

``multi_precision=True`` (a group option, MXNet's flag): each float16 or bfloat16 parameter keeps a float32 master
copy in ``state["master"]`` (made from the parameter at its first update, as MXNet's
``create_state_multi_precision``), its other state buffers are float32, and every step runs the float32 update on the
master with the gradient cast to float32, then rounds the master into the parameter (MXNet's
``update_multi_precision`` and its ``mp_*`` kernels). float32 and float64 parameters are updated as without the flag.
"""
from typing import Any, NamedTuple, Optional

import numpy as np
import torch

from migrate.optim.dmlc_float import mx_float32
from migrate.optim.sharded import is_dtensor, like_param, local, mesh_sums

__all__ = ["CAPTURABLE", "HALF_DTYPES", "MXNetOptimizer", "addcdiv_", "by_dtype", "cache_pieces", "clip_",
           "cached_on_cpu", "clip_bound", "clips", "compiled_on", "decayed_grads", "half_sum_sq", "kernel_float", "momentum_state",
           "per_tensor", "pick", "python_scaled", "python_scaled_all", "rounded_float32", "state_buffers"]

HALF_DTYPES = (torch.float16, torch.bfloat16)
"""Parameter dtypes that keep a float32 master copy under ``multi_precision``."""
CAPTURABLE = ("adadelta", "adam", "adamax", "ftml", "lamb", "nadam", "rmsprop")
"""The exact optimizers that offer ``capturable=True`` (those whose torch counterpart offers it)."""


def kernel_float(value):
    """``value`` as an MXNet kernel's scalar ``float`` parameter holds it (``str(value)`` parsed by dmlc's parser,
    which is not correctly rounded: ``migrate.optim.dmlc_float``), returned as a python float.

    Examples:
        >>> kernel_float(0.1)
        0.10000000149011612
    """
    return float(mx_float32(value))


def rounded_float32(value):
    """``value`` rounded to float32 (correctly), returned as a python float: C ``float`` arithmetic, and the
    ``lrs``/``wds`` MXNet passes as tuples (multi_sgd_update, multi_lamb_update) or float32 arrays (LARS).

    Examples:
        >>> rounded_float32(0.1)
        0.10000000149011612
    """
    return float(np.float32(value))


class MXNetOptimizer(torch.optim.Optimizer):
    """The shared machinery of migrate's exact optimizers: scaled and clipped gradients, per-parameter state and
    update counts, float32 master copies under ``multi_precision``, MXNet's update order.

    A subclass names its hyperparameters in ``hyperparameters``, its state buffers in ``state_names`` and
    implements ``_update(group, params, grads, states)`` (or ``_step_all``).

    Attributes:
        hyperparameters: MXNet's name and default of each hyperparameter the optimizer takes besides ``lr``,
            ``weight_decay``, ``rescale_grad``, ``clip_gradient`` and ``multi_precision`` (a group option each).
        state_names: The names of one parameter's state buffers, in the order of MXNet's state arrays (as
            ``convert_optimizer_state`` fills them); ``_new_state`` makes them zero unless a subclass overrides it.
        state_layouts: Every list of state names MXNet may keep for one parameter (RMSProp keeps ``n`` alone when
            not centered); None: ``state_names`` only.
        capturable_supported: Whether ``capturable=True`` is offered (where torch's counterpart,
            ``capturable_counterpart``, offers it): update counts and every per-step scalar stay on the parameters'
            device, so a step never synchronises the host and can be captured in a CUDA graph.

    Args (the group options every exact optimizer takes besides its ``hyperparameters``):
        compiled: Run MXNet's compiled kernels on the CPU tensors they can take (default); False: torch's
            multi-tensor ops everywhere, the path CUDA tensors take (the same numbers on CPU and CUDA).
        capturable: See ``capturable_supported`` (implies ``compiled=False``).

    Examples:
        >>> class Plain(MXNetOptimizer):  # w -= lr * clip(rescale_grad * g)
        ...     def _update(self, group, params, grads, states):
        ...         torch._foreach_add_(params, self._scaled(grads, group), alpha=-group["lr"])
    """

    hyperparameters = {}
    state_names = ()
    state_layouts = None
    capturable_supported = False
    capturable_counterpart = "torch.optim.SGD"

    def __init__(self, params, lr, weight_decay=0.0, rescale_grad=1.0, clip_gradient=None, multi_precision=False,
                 compiled=True, capturable=False, **hyper):
        unknown = sorted(set(hyper) - set(self.hyperparameters))
        if unknown:
            raise TypeError(f"{type(self).__name__} got unknown hyperparameters {unknown}; "
                            f"expected some of {sorted(self.hyperparameters)}")
        defaults = dict(self.hyperparameters, lr=lr, weight_decay=weight_decay, rescale_grad=rescale_grad,
                        clip_gradient=clip_gradient, multi_precision=bool(multi_precision), compiled=bool(compiled),
                        capturable=bool(capturable), **hyper)
        super().__init__(params, defaults)
        if any(group["capturable"] for group in self.param_groups) and not self.capturable_supported:
            raise TypeError(f"{type(self).__name__} has no capturable=True: torch's counterpart "
                            f"({self.capturable_counterpart}) offers none; the optimizers that do: "
                            f"{', '.join(CAPTURABLE)}")

    def __setstate__(self, state):
        """``torch.optim.Optimizer.__setstate__`` (what ``load_state_dict`` ends with), giving groups saved before the
        ``compiled`` and ``capturable`` options existed their defaults."""
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("compiled", True)
            group.setdefault("capturable", False)

    def state_dict(self):
        """``torch.optim.Optimizer.state_dict``, with the optimizer-wide entries (string keys of ``self.state``:
        Nadam's ``m_schedule``, LARS's ``lars_last_lr``) in every param group under ``"optimizer_state"``.

        ``"state"`` then holds per-parameter entries only, as ``torch.distributed.checkpoint.state_dict``'s
        ``get_state_dict`` maps each of its keys to a parameter name; ``load_state_dict`` puts them back.
        """
        out = super().state_dict()
        shared = {key: out["state"].pop(key) for key in [k for k in out["state"] if isinstance(k, str)]}
        if shared:
            for group in out["param_groups"]:
                group["optimizer_state"] = dict(shared)
        return out

    def load_state_dict(self, state_dict):
        """``torch.optim.Optimizer.load_state_dict``, keeping float32 master copies and buffers float32.

        torch casts every floating state tensor to its parameter's dtype; under ``multi_precision`` a half-precision
        parameter's ``master`` and buffers are float32 and are put back as saved. The optimizer-wide entries that
        ``state_dict`` keeps in the param groups return to ``self.state``.
        """
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            self.state.update(group.pop("optimizer_state", {}))
        saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        for saved_id, param in zip(saved_ids, params):
            saved = state_dict["state"].get(saved_id, {})
            if "master" in saved:
                for key, value in saved.items():
                    if torch.is_tensor(value) and value.is_floating_point() and key != "step":
                        self.state[param][key] = value.to(device=param.device, copy=True)

    def _new_state(self, param, group):
        """Fresh state of ``param``: its update count and zero buffers named by ``state_names``."""
        state = {"step": 0}
        for name in self.state_names:
            state[name] = torch.zeros_like(param, memory_format=torch.preserve_format)
        return state

    def _fresh_state(self, param, group):
        """``param``'s state, made (``_new_state``, on its float32 master under multi_precision) if it has none."""
        state = self.state[param]
        if "step" not in state:  # a multi_precision state may hold only its master yet
            state.update(self._new_state(state.get("master", param), group))
        return state

    def _entries(self, group):
        """One ``_Entry`` per parameter of ``group`` that has a gradient, its update count advanced.

        The entry's weight is the tensor the update writes (the parameter, or its float32 master under
        multi_precision; a DTensor's local shard) with its gradient (float32 for a master) and a state whose
        tensors are the same (local) tensors; ``_finish_entries`` rounds masters into their parameters and writes
        DTensor states back after the step.
        """
        entries, counts = [], []
        if group.get("frozen"):  # frozen parameters: no update, state and count untouched
            return entries
        for param in group["params"]:
            if param.grad is None:
                continue
            if param.grad.is_sparse:
                raise TypeError(f"{type(self).__name__} does not support sparse gradients; use a dense embedding")
            state = self._fresh_state(param, group)
            if group.get("capturable"):  # the count on the device, all counts advanced in one operation
                if not torch.is_tensor(state["step"]):
                    state["step"] = torch.tensor(float(state["step"]), device=local(param).device)
                counts.append(state["step"])
            else:
                state["step"] += 1
            entries.append(self._entry(param, state, group))
        if counts:
            torch._foreach_add_(counts, 1.0)
        return entries

    def _entry(self, param, state, group):
        """The ``_Entry`` of ``param`` (count advanced), remembered for ``_finish_entries``."""
        grad, half = local(param.grad), None
        if group.get("multi_precision") and param.dtype in HALF_DTYPES:
            half = (local(param), grad)
            weight, grad = local(state["master"]), grad.to(torch.float32)
        else:
            weight = local(param)
        view = {key: local(value) for key, value in state.items()} if is_dtensor(param) else state
        entry = _Entry(param, weight, grad, view, state, dict(view) if view is not state else None, half)
        self.__dict__.setdefault("_step_entries", {})[id(weight)] = entry
        return entry

    def _finish_entries(self):
        """After a step: each master rounded into its half-precision parameter (MXNet's ``cast(weight32,
        out=weight)``); each DTensor state written back (new tensors wrapped as DTensors like the parameter)."""
        for entry in self.__dict__.pop("_step_entries", {}).values():
            if entry.half is not None:
                entry.half[0].copy_(entry.weight)
            if entry.made is None:
                continue
            shard = tuple(local(entry.param).shape)
            for key, value in entry.state.items():
                if entry.made.get(key) is value:
                    continue
                wrap = torch.is_tensor(value) and not is_dtensor(value) and tuple(value.shape) == shard
                entry.saved[key] = like_param(value, entry.param) if wrap else value

    def _gather(self, group):
        """Weights, gradients and states (``_entries``) of the parameters of ``group`` that have a gradient."""
        entries = self._entries(group)
        return [e.weight for e in entries], [e.grad for e in entries], [e.state for e in entries]

    @staticmethod
    def _scaled(grads, group):
        """``clip(rescale_grad * grad)`` (MXNet's kernels clip after rescaling); read-only.

        Returns the gradients themselves (no copy) when rescale_grad is 1 and there is no clipping.
        """
        if group["rescale_grad"] == 1.0 and not clips(group):
            return grads
        out = torch._foreach_mul(grads, kernel_float(group["rescale_grad"]))
        clip_(out, group)
        return out

    @torch.no_grad()
    def step(self, closure=None):
        """Performs one MXNet update of every parameter that has a gradient.

        A call that ``torch.distributed.checkpoint.state_dict`` makes to create the state (``_init_optim_state``:
        no state yet, every lr 0, every gradient zero) creates each parameter's state and changes nothing else: no
        weight moves, no update count advances (MXNet's FTRL, for one, would set every weight to 0 at such a step).

        Args:
            closure: Optional callable that re-evaluates the model and returns the loss.

        Returns:
            The loss returned by ``closure``, or None.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._creates_state_only():
            self._create_states()
            return loss
        control = getattr(self, "_control", None)  # migrate.torch_control: element masks, held norm statistics
        self._masters()  # made before the control copies the masked elements of the state
        saved = control.before_step() if control is not None else None
        try:
            self._step_all()
        finally:
            self._finish_entries()
        if control is not None:
            control.after_step(saved)
        return loss

    def _creates_state_only(self):
        """Whether this step is torch's state-creating call (``_init_optim_state``): no parameter has a state,
        every group's lr is 0 and every gradient is zero."""
        if any(not isinstance(key, str) for key in self.state):
            return False
        if any(float(group["lr"]) != 0.0 for group in self.param_groups):
            return False
        grads = [local(p.grad) for group in self.param_groups for p in group["params"] if p.grad is not None]
        return bool(grads) and not any(bool(grad.any()) for grad in grads if grad.numel())

    def _create_states(self):
        """Each parameter's state (and multi_precision master) as its first update makes it, nothing updated."""
        self._masters()
        for group in self.param_groups:
            if not group.get("frozen"):
                for param in group["params"]:
                    if param.grad is not None:
                        self._fresh_state(param, group)

    def _step_all(self):
        """One update of every parameter that has a gradient, group by group."""
        for group in self.param_groups:
            params, grads, states = self._gather(group)
            if params:
                self._update(group, params, grads, states)

    def _update(self, group, params, grads, states):
        raise NotImplementedError

    def _in_mx_order(self):
        """(mx index, group, weight, grad, state) of every parameter with a gradient (count advanced), in MXNet's
        update order: the groups' ``mx_indices`` where present, else the order of the groups and their parameters."""
        entries, position = [], 0
        for group in self.param_groups:
            indices = group.get("mx_indices") or list(range(position, position + len(group["params"])))
            position += len(group["params"])
            order = {id(p): i for p, i in zip(group["params"], indices)}
            entries += [(order[id(e.param)], group, e.weight, e.grad, e.state) for e in self._entries(group)]
        return sorted(entries, key=lambda entry: entry[0])

    def _masters(self):
        """Make the float32 master of each half-precision parameter with a gradient in a multi_precision group.

        A master is made from its parameter at the parameter's first update (MXNet's
        ``create_state_multi_precision``) and lives in ``state["master"]``.
        """
        for group in self.param_groups:
            if not group.get("multi_precision") or group.get("frozen"):
                continue
            for param in group["params"]:
                if param.grad is None or param.dtype not in HALF_DTYPES:
                    continue
                state = self.state[param]
                if "master" not in state:
                    state["master"] = param.detach().to(torch.float32, copy=True)

    def _stands_on_master(self, weight):
        """Whether ``weight`` (of this step) is a float32 master standing in for a half-precision parameter."""
        entry = self.__dict__.get("_step_entries", {}).get(id(weight))
        return entry is not None and entry.half is not None

    def _param_of(self, weight):
        """The parameter whose update writes ``weight`` in this step."""
        return self.__dict__["_step_entries"][id(weight)].param

    def _stored(self, params, grads=None):
        """``params`` (or their ``grads``) as MXNet's norms read them: a weight standing on its master gives its
        half-precision weight (gradient); others give themselves. MXNet's multi_mp_lamb_update and LARS take the
        sums of squares of the float16 weight and gradient, not of the master (``half_sum_sq``)."""
        entries = self.__dict__.get("_step_entries", {})
        halves = [entries[id(p)].half if id(p) in entries else None for p in params]
        if grads is None:
            return [half[0] if half is not None else p for p, half in zip(params, halves)]
        return [half[1] if half is not None else g for g, half in zip(grads, halves)]

    def _constant(self, values, device, dtype=torch.float64):
        """``values`` as a tensor on ``device``, made once (kept out of the state_dict): a step under capturable
        copies nothing from the host, so it can be captured in a CUDA graph after its first steps."""
        cache = self.__dict__.setdefault("_constants", {})
        key = (tuple(values), str(device), dtype)
        if key not in cache:
            cache[key] = torch.tensor(values, dtype=dtype, device=device)
        return cache[key]

    def _mesh_sums(self, sums, weights):
        """Per-tensor sums over the local shards of ``weights`` (this step's) added over the ranks of each DTensor
        parameter (``sharded.mesh_sums``); the sums themselves where no parameter is a DTensor."""
        params = [self._param_of(w) for w in weights]
        return mesh_sums(sums, params) if any(is_dtensor(p) for p in params) else sums

    def _sharded(self, weights):
        """Whether any of this step's ``weights`` is the local shard of a DTensor parameter."""
        return any(is_dtensor(self._param_of(w)) for w in weights)


class _Entry(NamedTuple):
    """One parameter in one step: ``weight``/``grad``/``state`` are what the update reads and writes (``state``
    holds local tensors for a DTensor: ``made`` is that view as made, ``saved`` the optimizer's own dict);
    ``half`` is (half-precision weight, gradient) when ``weight`` is its float32 master."""

    param: Any
    weight: torch.Tensor
    grad: torch.Tensor
    state: dict
    saved: dict
    made: Optional[dict]
    half: Optional[tuple]


def momentum_state(param, group):
    """Fresh state of a momentum optimizer's ``param`` in ``group``: its update count, and a zero
    ``momentum_buffer`` when the group's momentum is not 0 (MXNet keeps no momentum state then).

    Examples:
        >>> momentum_state(torch.zeros(2), {"momentum": 0.9})
        {'step': 0, 'momentum_buffer': tensor([0., 0.])}
    """
    state = {"step": 0}
    if group["momentum"] != 0.0:
        state["momentum_buffer"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    return state


def clips(group):
    """Whether MXNet clips gradients for ``group`` (clip_gradient None or <= 0 means no clipping).

    Examples:
        >>> clips({"clip_gradient": None}), clips({"clip_gradient": 0.5})
        (False, True)
    """
    return group["clip_gradient"] is not None and group["clip_gradient"] > 0


def clip_bound(group) -> float:
    """clip_gradient as MXNet's kernels take it: the float32 bound, or -1 when it does not clip.

    Examples:
        >>> clip_bound({"clip_gradient": None}), clip_bound({"clip_gradient": 0.5})
        (-1.0, 0.5)
    """
    return kernel_float(group["clip_gradient"]) if clips(group) else -1.0


def clip_(tensors, group):
    """Clip ``tensors`` in place to +-clip_gradient when it is set (as MXNet's kernels: float32 bound)."""
    if clips(group):
        clip = kernel_float(group["clip_gradient"])
        torch._foreach_clamp_min_(tensors, -clip)
        torch._foreach_clamp_max_(tensors, clip)


def compiled_on(group) -> bool:
    """Whether ``group`` may take the compiled CPU kernels (``migrate.optim.compiled``): its ``compiled`` option (on
    by default) and not ``capturable``.

    Examples:
        >>> compiled_on({"compiled": True}), compiled_on({"compiled": False}), compiled_on({"capturable": True})
        (True, False, False)
    """
    return group.get("compiled", True) and not group.get("capturable", False)


def per_tensor(formula, states, group, like) -> list:
    """``formula(t)`` of each state's update count ``t``: python floats, or under ``capturable`` 0-dim tensors of
    ``like``'s dtype on its device, computed there in float64 from the device counts (no host sync). ``formula`` is
    written once for both (``beta ** t``, ``x ** 0.5``, arithmetic).

    Examples:
        >>> per_tensor(lambda t: 1 - 0.9 ** t, [{"step": 1}, {"step": 2}], {}, torch.zeros(1))
        [0.09999999999999998, 0.18999999999999995]
    """
    if not group.get("capturable"):
        return [formula(state["step"]) for state in states]
    counts = torch.stack([state["step"] for state in states]).to(device=like.device, dtype=torch.float64)
    return list(formula(counts).to(like.dtype).unbind())


def addcdiv_(tensors, numerators, denominators, scalars) -> None:
    """``tensors[i] += scalars[i] * numerators[i] / denominators[i]`` with torch's multi-tensor ops; ``scalars``
    python floats (one addcdiv) or 0-dim device tensors (``per_tensor`` under capturable: divide, scale, add)."""
    if not scalars or not torch.is_tensor(scalars[0]):
        torch._foreach_addcdiv_(tensors, numerators, denominators, scalars)
        return
    quotients = torch._foreach_div(numerators, denominators)
    torch._foreach_mul_(quotients, scalars)
    torch._foreach_add_(tensors, quotients)


def cached_on_cpu(params, group) -> bool:
    """Whether a CPU group runs its torch ops piece by piece in cache (``cache_pieces``), not on whole lists: CPU
    tensors and the ``compiled`` option (off: the multi-tensor path CUDA takes, on CPU too).

    Examples:
        >>> cached_on_cpu([torch.zeros(1)], {"compiled": True}), cached_on_cpu([torch.zeros(1)], {"compiled": False})
        (True, False)
    """
    return params[0].device.type == "cpu" and compiled_on(group)


def pick(items, positions):
    """``items`` at ``positions`` (the list itself when ``positions`` covers all of it in order).

    Examples:
        >>> pick(["a", "b", "c"], [2, 0])
        ['c', 'a']
    """
    if len(positions) == len(items) and all(i == p for i, p in enumerate(positions)):
        return items
    return [items[i] for i in positions]


def by_dtype(tensors) -> dict:
    """Positions of ``tensors`` by dtype (the torch ops that take per-dtype scalars run once per dtype).

    Examples:
        >>> by_dtype([torch.zeros(1), torch.zeros(1, dtype=torch.float64), torch.zeros(2)])
        {torch.float32: [0, 2], torch.float64: [1]}
    """
    out = {}
    for position, tensor in enumerate(tensors):
        out.setdefault(tensor.dtype, []).append(position)
    return out


def state_buffers(states, name):
    """The buffer ``name`` of each of ``states`` (per-parameter state dicts), in order."""
    return [state[name] for state in states]


def decayed_grads(grads, params, group, clip=True):
    """New tensors ``rescale_grad*g + wd*w``, clipped when ``clip`` (MXNet's Adam, RMSProp and FTML kernels clip
    after adding wd)."""
    if group["rescale_grad"] == 1.0:
        out = torch._foreach_add(grads, params, alpha=kernel_float(group["weight_decay"]))
    else:
        out = torch._foreach_mul(grads, kernel_float(group["rescale_grad"]))
        torch._foreach_add_(out, params, alpha=kernel_float(group["weight_decay"]))
    if clip:
        clip_(out, group)
    return out


def python_scaled(grad, group):
    """``clip(grad * rescale_grad)`` as MXNet's python optimizers write it (clipped whenever clip_gradient is set).

    A new tensor. MXNet's ``clip(x, -c, c)`` with ``c < 0`` gives ``c`` where ``x > c``, else ``-c``; kept here.

    Examples:
        >>> python_scaled(torch.tensor([3.0, -1.0]), {"rescale_grad": 0.5, "clip_gradient": 1.0})
        tensor([ 1.0000, -0.5000])
    """
    out = grad * group["rescale_grad"]
    clip = group["clip_gradient"]
    if clip is None:
        return out
    if clip >= 0:
        return out.clamp_(-clip, clip)
    return torch.where(out > clip, torch.full_like(out, clip), torch.full_like(out, -clip))


def python_scaled_all(grads, group):
    """``python_scaled`` of each of ``grads`` with torch's multi-tensor ops (one new list).

    Examples:
        >>> python_scaled_all([torch.tensor([3.0, -1.0])], {"rescale_grad": 0.5, "clip_gradient": 1.0})
        [tensor([ 1.0000, -0.5000])]
    """
    clip = group["clip_gradient"]
    if clip is not None and clip < 0:
        return [python_scaled(grad, group) for grad in grads]
    out = torch._foreach_mul(grads, group["rescale_grad"])
    if clip is not None:
        torch._foreach_clamp_min_(out, -clip)
        torch._foreach_clamp_max_(out, clip)
    return out


def half_sum_sq(tensor):
    """MXNet's CPU multi_sum_sq of one float16 (or bfloat16) tensor: each square rounded to the tensor's dtype
    (mshadow's half arithmetic: float product, rounded), summed in element order into a C float.

    Examples:
        >>> half_sum_sq(torch.tensor([0.5, 2.0], dtype=torch.float16))
        4.25
    """
    if not tensor.numel():
        return 0.0
    squares = (tensor.detach() * tensor.detach()).to("cpu", torch.float32).reshape(-1).numpy()
    return float(np.cumsum(squares, dtype=np.float32)[-1])  # cumsum adds in order, unlike the pairwise sum


_PIECE = 1 << 18
"""Elements per piece in cache-blocked updates: several passes over a piece stay in cache, not in memory."""


def cache_pieces(columns):
    """Tuples of matching flat views, at most ``_PIECE`` elements each, of the tensors in ``columns``.

    Tensors that are not all contiguous are yielded whole.
    """
    for row in zip(*columns):
        if row[0].numel() <= _PIECE or not all(t.is_contiguous() for t in row):
            yield row
        else:
            yield from zip(*(t.view(-1).split(_PIECE) for t in row))
