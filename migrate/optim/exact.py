"""torch optimizers that reproduce MXNet 1.9.1's update operators exactly.

Each class follows one MXNet optimizer (``mxnet/optimizer/optimizer.py`` and the kernels in
``src/operator/optimizer_op-inl.h``): gradients are multiplied by ``rescale_grad`` and clipped elementwise to
``+-clip_gradient``, every per-parameter update count ``step`` is kept, and the hyperparameters that MXNet's
kernels take as C ``float`` are the float32 values MXNet parses from ``str(value)`` (``migrate.optim.dmlc_float``;
tuple and array parameters correctly rounded), so float64 runs agree to ~1e-16 per step.
Where torch has no kernel that keeps MXNet's order of operations (SGD, NAG and FTRL: torch's ``add(alpha=)`` is a
fused multiply-add, MXNet's kernels round each operation; LAMB's float64 norms), compiled numba loops
(``migrate.optim._kernels``) replay MXNet's C++ loops on CPU tensors, bit for bit; other tensors take a torch path.
A group's ``lr`` and ``weight_decay`` are absolute (MXNet's ``schedule(num_update) * lr_mult`` and
``wd * wd_mult``); ``migrate.torch_lr_scheduler`` keeps ``lr`` on MXNet's schedule.

``multi_precision=True`` (a group option, MXNet's flag): each float16 or bfloat16 parameter keeps a float32 master
copy in ``state["master"]`` (made from the parameter at its first update, as MXNet's
``create_state_multi_precision``), its other state buffers are float32, and every step runs the float32 update on the
master with the gradient cast to float32, then rounds the master into the parameter (MXNet's
``update_multi_precision`` and its ``mp_*`` kernels). float32 and float64 parameters are updated as without the flag.
"""
import math

import numpy as np
import torch

from migrate.optim import _kernels
from migrate.optim.dmlc_float import mx_float32


def _f32(value):
    """``value`` as an MXNet kernel's scalar ``float`` parameter holds it (``str(value)`` parsed by dmlc's parser,
    which is not correctly rounded: ``migrate.optim.dmlc_float``), returned as a python float."""
    return float(mx_float32(value))


def _round32(value):
    """``value`` rounded to float32 (correctly), returned as a python float: C ``float`` arithmetic, and the
    ``lrs``/``wds`` MXNet passes as tuples (multi_sgd_update, multi_lamb_update) or float32 arrays (LARS)."""
    return float(np.float32(value))


class _MXNetOptimizer(torch.optim.Optimizer):
    """Shared machinery: scaled and clipped gradients, per-parameter state and update counts."""

    _state_names = ()
    _hyper = {}

    def __init__(self, params, lr, weight_decay=0.0, rescale_grad=1.0, clip_gradient=None, multi_precision=False,
                 **hyper):
        unknown = sorted(set(hyper) - set(self._hyper))
        if unknown:
            raise TypeError(f"{type(self).__name__} got unknown hyperparameters {unknown}; "
                            f"expected some of {sorted(self._hyper)}")
        defaults = dict(self._hyper, lr=lr, weight_decay=weight_decay, rescale_grad=rescale_grad,
                        clip_gradient=clip_gradient, multi_precision=bool(multi_precision), **hyper)
        super().__init__(params, defaults)

    def load_state_dict(self, state_dict):
        """``torch.optim.Optimizer.load_state_dict``, keeping float32 master copies and buffers float32.

        torch casts every floating state tensor to its parameter's dtype; under ``multi_precision`` a half-precision
        parameter's ``master`` and buffers are float32 and are put back as saved.
        """
        super().load_state_dict(state_dict)
        saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        params = [p for group in self.param_groups for p in group["params"]]
        for saved_id, param in zip(saved_ids, params):
            saved = state_dict["state"].get(saved_id, {})
            if "master" in saved:
                for key, value in saved.items():
                    if torch.is_tensor(value) and value.is_floating_point() and key != "step":
                        self.state[param][key] = value.to(device=param.device, copy=True)

    def _new_state(self, param, group):
        """Fresh state of ``param``: its update count and zero buffers named by ``_state_names``."""
        state = {"step": 0}
        for name in self._state_names:
            state[name] = torch.zeros_like(param, memory_format=torch.preserve_format)
        return state

    def _gather(self, group):
        """Parameters of ``group`` that have a gradient, their gradients and their states (count advanced)."""
        params, grads, states = [], [], []
        if group.get("frozen"):  # frozen parameters: no update, state and count untouched
            return params, grads, states
        for param in group["params"]:
            if param.grad is None:
                continue
            if param.grad.is_sparse:
                raise TypeError(f"{type(self).__name__} does not support sparse gradients; use a dense embedding")
            state = self.state[param]
            if "step" not in state:  # a multi_precision state may hold only its master yet
                state.update(self._new_state(param, group))
            state["step"] += 1
            params.append(param)
            grads.append(param.grad)
            states.append(state)
        return params, grads, states

    @staticmethod
    def _scaled(grads, group):
        """``clip(rescale_grad * grad)`` (MXNet's kernels clip after rescaling); read-only.

        Returns the gradients themselves (no copy) when rescale_grad is 1 and there is no clipping.
        """
        if group["rescale_grad"] == 1.0 and not _clips(group):
            return grads
        out = torch._foreach_mul(grads, _f32(group["rescale_grad"]))
        _clip_(out, group)
        return out

    @torch.no_grad()
    def step(self, closure=None):
        """Performs one MXNet update of every parameter that has a gradient.

        Args:
            closure: Optional callable that re-evaluates the model and returns the loss.

        Returns:
            The loss returned by ``closure``, or None.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        control = getattr(self, "_control", None)  # migrate.torch_control: element masks, held norm statistics
        masters = self._masters()  # made before the control copies the masked elements of the state
        saved = control.before_step() if control is not None else None
        if masters:
            self._step_on_masters(masters)
        else:
            self._step_all()
        if control is not None:
            control.after_step(saved)
        return loss

    def _step_all(self):
        """One update of every parameter that has a gradient, group by group."""
        for group in self.param_groups:
            params, grads, states = self._gather(group)
            if params:
                self._update(group, params, grads, states)

    def _update(self, group, params, grads, states):
        raise NotImplementedError

    def _in_mx_order(self):
        """(mx index, group, param, grad, state) of every parameter with a gradient (count advanced), in MXNet's
        update order: the groups' ``mx_indices`` where present, else the order of the groups and their parameters."""
        entries, position = [], 0
        for group in self.param_groups:
            indices = group.get("mx_indices") or list(range(position, position + len(group["params"])))
            position += len(group["params"])
            order = {id(p): i for p, i in zip(group["params"], indices)}
            params, grads, states = self._gather(group)
            entries += [(order[id(p)], group, p, g, s) for p, g, s in zip(params, grads, states)]
        return sorted(entries, key=lambda entry: entry[0])

    def _masters(self):
        """(parameter, float32 master) of each half-precision parameter with a gradient in a multi_precision group.

        A master is made from its parameter at the parameter's first update (MXNet's
        ``create_state_multi_precision``) and lives in ``state["master"]``.
        """
        out = []
        for group in self.param_groups:
            if not group.get("multi_precision") or group.get("frozen"):
                continue
            for param in group["params"]:
                if param.grad is None or param.dtype not in _HALF:
                    continue
                state = self.state[param]
                if "master" not in state:
                    state["master"] = param.detach().to(torch.float32, copy=True)
                out.append((param, state["master"]))
        return out

    def _step_on_masters(self, masters):
        """``_step_all`` with each parameter of ``masters`` standing on its float32 master and a float32 gradient.

        The update writes the master in place (the parameter shares its storage during the step), so every
        optimizer's float32 path runs unchanged; then the master is rounded into the half-precision parameter, as
        MXNet's ``cast(weight32, out=weight)``.
        """
        halves = [(param, param.data, param.grad) for param, _ in masters]
        self.__dict__["_halves"] = {id(param): (half, grad) for param, half, grad in halves}
        try:
            for param, master in masters:
                grad = param.grad
                param.data = master
                param.grad = grad.to(torch.float32)
            self._step_all()
        finally:
            self.__dict__["_halves"] = {}
            for (param, master), (_, half, grad) in zip(masters, halves):
                param.data = half
                param.grad = grad
                half.copy_(master)

    def _stored(self, params, grads=None):
        """``params`` (or their ``grads``) as MXNet's norms read them: a parameter standing on its master gives its
        half-precision weight (gradient); others give themselves. MXNet's multi_mp_lamb_update and LARS take the
        sums of squares of the float16 weight and gradient, not of the master (``half_sum_sq``)."""
        halves = self.__dict__.get("_halves") or {}
        if grads is None:
            return [halves[id(p)][0] if id(p) in halves else p for p in params]
        return [halves[id(p)][1] if id(p) in halves else g for p, g in zip(params, grads)]


_HALF = (torch.float16, torch.bfloat16)
"""Parameter dtypes that keep a float32 master copy under ``multi_precision``."""


def _clips(group):
    """Whether MXNet clips gradients for ``group`` (clip_gradient None or <= 0 means no clipping)."""
    return group["clip_gradient"] is not None and group["clip_gradient"] > 0


def _clip_(tensors, group):
    """Clip ``tensors`` in place to +-clip_gradient when it is set."""
    if _clips(group):
        clip = _f32(group["clip_gradient"])
        torch._foreach_clamp_min_(tensors, -clip)
        torch._foreach_clamp_max_(tensors, clip)


def _buffers(states, name):
    return [state[name] for state in states]


_PIECE = 1 << 18
"""Elements per piece in cache-blocked updates: several passes over a piece stay in cache, not in memory."""


def _pieces(columns):
    """Tuples of matching flat views, at most ``_PIECE`` elements each, of the tensors in ``columns``.

    Tensors that are not all contiguous are yielded whole.
    """
    for row in zip(*columns):
        if row[0].numel() <= _PIECE or not all(t.is_contiguous() for t in row):
            yield row
        else:
            yield from zip(*(t.view(-1).split(_PIECE) for t in row))


class SGD(_MXNetOptimizer):
    """MXNet ``sgd``: ``m = momentum*m - lr*wd*w - lr*clip(rescale_grad*g); w += m`` (lr inside the momentum).

    Example:
        >>> opt = SGD(model.parameters(), lr=0.1, momentum=0.9, rescale_grad=1 / 32)
    """

    _hyper = {"momentum": 0.0, "lazy_update": True}

    def _new_state(self, param, group):
        state = {"step": 0}
        if group["momentum"] != 0.0:
            state["momentum_buffer"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        return state

    def _update(self, group, params, grads, states):
        lr, wd = _round32(group["lr"]), _round32(group["weight_decay"])  # multi_sgd(_mom)_update's lrs/wds tuples
        momentum = group["momentum"] > 0
        hyper = (lr, wd, _f32(group["momentum"]) if momentum else 0.0, _f32(group["rescale_grad"]),
                 _f32(group["clip_gradient"]) if _clips(group) else -1.0)
        moms = _buffers(states, "momentum_buffer") if momentum else [None] * len(params)
        rows = [row for row in zip(params, grads, moms) if not _kernels.run_in_place(_kernels.sgd_update, row, *hyper)]
        if not rows:
            return
        params, grads, moms = (list(column) for column in zip(*rows))  # CUDA, strided, half: the torch path
        grads = self._scaled(grads, group)
        if momentum:
            torch._foreach_mul_(moms, _f32(group["momentum"]))
            torch._foreach_add_(moms, params, alpha=-lr * wd)
            torch._foreach_add_(moms, grads, alpha=-lr)
            torch._foreach_add_(params, moms)
        else:  # multi_sgd_update: the momentum formula with a zero momentum
            step = torch._foreach_mul(params, -lr * wd)
            torch._foreach_add_(step, grads, alpha=-lr)
            torch._foreach_add_(params, step)


class NAG(_MXNetOptimizer):
    """MXNet ``nag`` (nag_mom_update): ``m1 = mu*m; w += -m1 + (mu+1)*(m1 - lr*gg); m = m1 - lr*gg'``.

    ``gg = clip(rescale_grad*g) + wd*w`` with the old weight, ``gg'`` the same with the new weight: MXNet's kernel
    writes the weight in place before it updates the momentum.

    Example:
        >>> opt = NAG(model.parameters(), lr=0.1, momentum=0.9)
    """

    _hyper = {"momentum": 0.0}

    def _new_state(self, param, group):
        return SGD._new_state(self, param, group)

    def _update(self, group, params, grads, states):
        lr, wd, mom = _f32(group["lr"]), _f32(group["weight_decay"]), _f32(group["momentum"])
        if mom <= 0:  # sgd_update: w = (1 - lr*wd)*w - lr*clip(rescale_grad*g)
            clipped = self._scaled(grads, group)
            torch._foreach_mul_(params, 1.0 - lr * wd)
            torch._foreach_add_(params, clipped, alpha=-lr)
            return
        clip = _f32(group["clip_gradient"]) if _clips(group) else -1.0
        rows = [row for row in zip(params, grads, _buffers(states, "momentum_buffer"))
                if not _kernels.run_in_place(_kernels.nag_update, row, lr, wd, mom, _f32(group["rescale_grad"]), clip)]
        if rows:  # CUDA, non-contiguous or half-precision tensors: the torch path (same order of operations)
            params, grads, moments = (list(column) for column in zip(*rows))
            for weight, grad, moment in _pieces((params, self._scaled(grads, group), moments)):
                _nag_piece(weight, grad, moment, lr, wd, mom)


def _nag_piece(weight, grad, moment, lr, wd, mom):
    """MXNet's nag_mom_update (and mp_nag_mom_update on a master) on one piece, in the kernel's order of operations:
    ``m1 = mu*m; w = (w - m1) + (mu+1)*(m1 - lr*(g + wd*w)); m = m1 - lr*(g + wd*w_new)``, each operation rounded
    (no fused multiply-add), so float32 runs are bit for bit MXNet's."""
    moment.mul_(mom)
    decayed = torch.mul(weight, wd).add_(grad) if wd else grad.clone()
    decayed.mul_(lr)
    decayed.neg_().add_(moment)  # m1 - lr*gg
    decayed.mul_(_round32(mom + 1.0))
    weight.sub_(moment).add_(decayed)
    step = torch.mul(weight, wd).add_(grad) if wd else grad.clone()
    moment.sub_(step.mul_(lr))


def _decayed(grads, params, group, clip=True):
    """New tensors ``rescale_grad*g + wd*w``, clipped when ``clip`` (MXNet clips after adding wd here)."""
    if group["rescale_grad"] == 1.0:
        out = torch._foreach_add(grads, params, alpha=_f32(group["weight_decay"]))
    else:
        out = torch._foreach_mul(grads, _f32(group["rescale_grad"]))
        torch._foreach_add_(out, params, alpha=_f32(group["weight_decay"]))
    if clip:
        _clip_(out, group)
    return out


def _moments_(means, variances, grads, beta1, beta2):
    """Adam's moment updates in place: ``m = b1*m + (1-b1)*g`` (as one lerp_), ``v = b2*v + (1-b2)*g^2``."""
    torch._foreach_lerp_(means, grads, 1.0 - beta1)
    torch._foreach_mul_(variances, beta2)
    torch._foreach_addcmul_(variances, grads, grads, value=1.0 - beta2)


class Adam(_MXNetOptimizer):
    """MXNet ``adam``: ``gg = clip(rescale_grad*g + wd*w)``; bias correction folded into lr; eps outside the sqrt.

    Example:
        >>> opt = Adam(model.parameters(), lr=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8)
    """

    _hyper = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "lazy_update": True}
    _state_names = ("mean", "var")

    def _update(self, group, params, grads, states):
        beta1, beta2 = _f32(group["beta1"]), _f32(group["beta2"])
        wd = _f32(group["weight_decay"])
        hyper = (wd, beta1, beta2, _f32(group["epsilon"]), _f32(group["rescale_grad"]),
                 _f32(group["clip_gradient"]) if _clips(group) else -1.0)
        rows = [(p, g, s) for p, g, s in zip(params, grads, states)
                if not _kernels.run_in_place(_kernels.adam_update, (p, g, s["mean"], s["var"]), _adam_lr(group, s),
                                             *hyper)]
        if not rows:
            return
        params, grads, states = (list(column) for column in zip(*rows))  # CUDA, strided, half: the torch path
        if group["rescale_grad"] != 1.0 or _clips(group):  # wd goes inside the clip: a pre-pass
            grads, wd = _decayed(grads, params, group), 0.0
        for step, index in _by_step(states).items():
            # torch's kernel: w -= lr_k/(1-b1^t) * m/(sqrt(v)/sqrt(1-b2^t) + eps_k); MXNet's update is
            # w -= f32(lr*sqrt(1-b2^t)/(1-b1^t)) * m/(sqrt(v) + eps): choose lr_k and eps_k to make them equal
            mx_step = _adam_lr(group, states[index[0]])
            root2 = math.sqrt(1.0 - beta2 ** step)
            torch._fused_adam_(
                _pick(params, index), _pick(grads, index), _pick(_buffers(states, "mean"), index),
                _pick(_buffers(states, "var"), index), [], [_step_tensor(step, params[0].device)] * len(index),
                lr=mx_step * (1.0 - beta1 ** step) / root2, beta1=beta1, beta2=beta2, weight_decay=wd,
                eps=_f32(group["epsilon"]) / root2, amsgrad=False, maximize=False)


def _adam_lr(group, state):
    """MXNet's Adam lr for this update count, as its kernel parses it: ``lr *= sqrt(1-b2^t)/(1-b1^t)`` in doubles."""
    step = state["step"]
    return _f32(group["lr"] * (math.sqrt(1.0 - group["beta2"] ** step) / (1.0 - group["beta1"] ** step)))


def _by_step(states):
    """Positions of ``states`` grouped by update count, so each count takes one fused kernel call."""
    out = {}
    for position, state in enumerate(states):
        out.setdefault(state["step"], []).append(position)
    return out


def _pick(items, index):
    """``items`` at positions ``index`` (the list itself when ``index`` covers all of it in order)."""
    return items if len(index) == len(items) else [items[i] for i in index]


def _step_tensor(step, device):
    """The update count as the float32 scalar tensor torch's fused kernels read (on the parameters' device: CUDA's
    kernels refuse a CPU one)."""
    return torch.tensor(float(step), dtype=torch.float32, device=device)


class RMSProp(_MXNetOptimizer):
    """MXNet ``rmsprop``: eps inside the sqrt; centered (Graves) keeps lr inside the momentum ``delta``.

    Example:
        >>> opt = RMSProp(model.parameters(), lr=1e-3, gamma1=0.9, gamma2=0.9, centered=True)
    """

    _hyper = {"gamma1": 0.9, "gamma2": 0.9, "epsilon": 1e-8, "centered": False, "clip_weights": None}

    def _new_state(self, param, group):
        names = ("n", "g", "delta") if group["centered"] else ("n",)
        state = {"step": 0}
        state.update({name: torch.zeros_like(param, memory_format=torch.preserve_format) for name in names})
        return state

    def _update(self, group, params, grads, states):
        lr, gamma1 = _f32(group["lr"]), _f32(group["gamma1"])
        hyper = (lr, _f32(group["weight_decay"]), gamma1, _f32(group["gamma2"]), _f32(group["epsilon"]),
                 _f32(group["rescale_grad"]), _f32(group["clip_gradient"]) if _clips(group) else -1.0,
                 _f32(group["clip_weights"]) if group["clip_weights"] else -1.0)
        centered = group["centered"]
        rows = [(p, g, s) for p, g, s in zip(params, grads, states)
                if not _kernels.run_in_place(_kernels.rmsprop_update, (p, g, *_rmsprop_buffers(s, centered)), *hyper)]
        if not rows:
            return
        params, grads, states = (list(column) for column in zip(*rows))  # CUDA, strided, half: the torch path
        grads = _decayed(grads, params, group)
        n = _buffers(states, "n")
        torch._foreach_mul_(n, gamma1)
        torch._foreach_addcmul_(n, grads, grads, value=1.0 - gamma1)
        if group["centered"]:
            gbar, delta = _buffers(states, "g"), _buffers(states, "delta")
            torch._foreach_mul_(gbar, gamma1)
            torch._foreach_add_(gbar, grads, alpha=1.0 - gamma1)
            denom = torch._foreach_addcmul(n, gbar, gbar, value=-1.0)
            torch._foreach_add_(denom, _f32(group["epsilon"]))
        else:
            denom = torch._foreach_add(n, _f32(group["epsilon"]))
        torch._foreach_sqrt_(denom)
        if group["centered"]:
            torch._foreach_mul_(delta, _f32(group["gamma2"]))
            torch._foreach_addcdiv_(delta, grads, denom, value=-lr)
            torch._foreach_add_(params, delta)
        else:
            torch._foreach_addcdiv_(params, grads, denom, value=-lr)
        if group["clip_weights"]:
            clip = _f32(group["clip_weights"])
            torch._foreach_clamp_min_(params, -clip)
            torch._foreach_clamp_max_(params, clip)


def _rmsprop_buffers(state, centered):
    """(n, g, delta) of an RMSProp state; g and delta None when not centered (the plain kernel has n only)."""
    return (state["n"], state["g"], state["delta"]) if centered else (state["n"], None, None)


class AdaGrad(_MXNetOptimizer):
    """MXNet ``adagrad``: ``h += clip(rescale_grad*g)^2; w -= lr*(g/sqrt(h + eps) + wd*w)`` (decoupled wd).

    Example:
        >>> opt = AdaGrad(model.parameters(), lr=0.01, eps=1e-7)
    """

    _hyper = {"eps": 1e-7}
    _state_names = ("history",)

    def _update(self, group, params, grads, states):
        grads = self._scaled(grads, group)
        for piece in _pieces((params, grads, _buffers(states, "history"))):
            _adagrad_piece(*piece, group["lr"], group["weight_decay"], group["eps"])


def _adagrad_piece(weight, grad, history, lr, wd, eps):
    """MXNet's adagrad update on one piece (python-double hyperparameters, as MXNet's python AdaGrad)."""
    history.addcmul_(grad, grad)
    denom = history.add(eps).sqrt_()
    if wd:
        step = grad.div(denom).add_(weight, alpha=wd)
        weight.add_(step, alpha=-lr)
    else:
        weight.addcdiv_(grad, denom, value=-lr)


class AdaDelta(_MXNetOptimizer):
    """MXNet ``adadelta``: lr is ignored entirely; ``w -= delta + wd*w`` (wd not scaled by lr).

    Example:
        >>> opt = AdaDelta(model.parameters(), lr=1.0, rho=0.9, epsilon=1e-5)
    """

    _hyper = {"rho": 0.9, "epsilon": 1e-5}
    _state_names = ("acc_g", "acc_delta")

    def _update(self, group, params, grads, states):
        grads = self._scaled(grads, group)
        for piece in _pieces((params, grads, _buffers(states, "acc_g"), _buffers(states, "acc_delta"))):
            _adadelta_piece(*piece, group["rho"], group["epsilon"], group["weight_decay"])


def _adadelta_piece(weight, grad, acc_g, acc_delta, rho, eps, wd):
    """MXNet's adadelta update on one piece: ``delta = sqrt(acc_delta + eps)/sqrt(acc_g + eps)*g``."""
    acc_g.mul_(rho).addcmul_(grad, grad, value=1.0 - rho)
    delta = acc_delta.add(eps).sqrt_()
    delta.div_(acc_g.add(eps).sqrt_()).mul_(grad)
    acc_delta.mul_(rho).addcmul_(delta, delta, value=1.0 - rho)
    delta.add_(weight, alpha=wd)
    weight.sub_(delta)


class Adamax(_MXNetOptimizer):
    """MXNet ``adamax``: ``u = max(beta2*u, |gg|)`` with no epsilon; ``w -= lr/(1-beta1^t) * m/u``.

    Example:
        >>> opt = Adamax(model.parameters(), lr=2e-3, beta1=0.9, beta2=0.999)
    """

    _hyper = {"beta1": 0.9, "beta2": 0.999}
    _state_names = ("mean", "var")

    def _update(self, group, params, grads, states):
        beta1 = group["beta1"]
        grads = _python_decayed(grads, params, group)
        means, norms = _buffers(states, "mean"), _buffers(states, "var")
        torch._foreach_mul_(means, beta1)
        torch._foreach_add_(means, grads, alpha=1.0 - beta1)
        torch._foreach_mul_(norms, group["beta2"])
        torch._foreach_maximum_(norms, torch._foreach_abs(grads))
        steps = [-(group["lr"] / (1.0 - beta1 ** s["step"])) for s in states]
        torch._foreach_addcdiv_(params, means, norms, steps)


def _python_decayed(grads, params, group):
    """``clip(g*rescale_grad + wd*w)`` computed as MXNet's python optimizers do (double scalars)."""
    if group["rescale_grad"] == 1.0:
        out = torch._foreach_add(grads, params, alpha=group["weight_decay"])
    else:
        out = torch._foreach_mul(grads, group["rescale_grad"])
        torch._foreach_add_(out, params, alpha=group["weight_decay"])
    _clip_(out, group)
    return out


class Nadam(_MXNetOptimizer):
    """MXNet ``nadam``: one momentum schedule shared by all parameters, advanced once per parameter update.

    Parameters are updated in MXNet's index order (the ``mx_indices`` of each group when present, else group
    order), so the result depends on the parameter count and order exactly as in MXNet.

    Example:
        >>> opt = Nadam(model.parameters(), lr=1e-3, schedule_decay=0.004)
    """

    _hyper = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "schedule_decay": 0.004}
    _state_names = ("mean", "var")

    def __init__(self, params, lr, **kwargs):
        super().__init__(params, lr, **kwargs)
        self.state["m_schedule"] = 1.0

    def _schedule(self, entries):
        """Per-parameter (momentum_t, momentum_t_1, m_schedule, m_schedule_next), advancing the shared product."""
        out, m_schedule = [], self.state["m_schedule"]
        for _, group, _, _, state in entries:
            t, beta1, decay = state["step"], group["beta1"], group["schedule_decay"]
            momentum_t = beta1 * (1.0 - 0.5 * (pow(0.96, t * decay)))
            momentum_t_1 = beta1 * (1.0 - 0.5 * (pow(0.96, (t + 1) * decay)))
            m_schedule = m_schedule * momentum_t
            out.append((momentum_t, momentum_t_1, m_schedule, m_schedule * momentum_t_1))
        self.state["m_schedule"] = m_schedule
        return out

    def _step_all(self):
        """One update of every parameter that has a gradient, in MXNet's order (the schedule is shared)."""
        entries = self._in_mx_order()
        if entries:
            self._update_all(entries, self._schedule(entries))

    def _update_all(self, entries, schedule):
        """Apply the update group by group (foreach), each parameter with its own schedule values."""
        by_group = {}
        for (_, group, param, grad, state), values in zip(entries, schedule):
            by_group.setdefault(id(group), (group, []))[1].append((param, grad, state, values))
        for group, items in by_group.values():
            self._update_group(group, *(list(column) for column in zip(*items)))

    @staticmethod
    def _update_group(group, params, grads, states, schedule):
        beta1, beta2 = group["beta1"], group["beta2"]
        grads = _python_decayed(grads, params, group)
        means, variances = _buffers(states, "mean"), _buffers(states, "var")
        torch._foreach_mul_(means, beta1)
        torch._foreach_add_(means, grads, alpha=1.0 - beta1)
        torch._foreach_mul_(variances, beta2)
        torch._foreach_addcmul_(variances, grads, grads, value=1.0 - beta2)
        denom = torch._foreach_div(variances, [1.0 - pow(beta2, s["step"]) for s in states])
        torch._foreach_sqrt_(denom)
        torch._foreach_add_(denom, group["epsilon"])
        lr = group["lr"]  # w -= lr*((1-mu_t)*g/(1-m_sched) + mu_t1*m/(1-m_sched_next)) / denom, as two addcdiv_
        torch._foreach_addcdiv_(params, grads, denom, [-lr * (1.0 - m[0]) / (1.0 - m[2]) for m in schedule])
        torch._foreach_addcdiv_(params, means, denom, [-lr * m[1] / (1.0 - m[3]) for m in schedule])


class LAMB(_MXNetOptimizer):
    """MXNet ``lamb`` (multi_lamb_update): Adam direction plus ``wd*w``, scaled by the trust ratio ||w||/||g||.

    The weight norm is bounded below by ``lower_bound`` and above by ``upper_bound`` when they are set.

    Note:
        Gluon's Trainer updates LAMB through ``multi_lamb_update`` (``aggregate_num`` 45 unless
        ``MXNET_OPTIMIZER_AGGREGATION_SIZE`` lowers it; 1 switches MXNet to ``lamb_update_phase1/2`` with
        ``nd.norm``, 2e-9 from this class in float64). Its norms come from ``multi_sum_sq``: each tensor summed in
        element order into a C ``float`` by one thread, so they do not depend on MXNet's thread count. Here float64
        CPU tensors replay that sum exactly (numba); float32 and CUDA tensors use torch's norm (~1e-7 relative).

    Example:
        >>> opt = LAMB(model.parameters(), lr=1e-3, epsilon=1e-6)
    """

    _hyper = {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6, "lower_bound": None, "upper_bound": None,
              "bias_correction": True}
    _state_names = ("mean", "var")

    def _update(self, group, params, grads, states):
        grads = self._scaled(grads, group)
        negated = self._negated_directions(group, params, grads, states)
        torch._foreach_add_(negated, params, alpha=-_round32(group["weight_decay"]))  # multi_lamb's wds tuple
        if negated[0].dtype != torch.float32:  # MXNet keeps the direction in a float32 buffer
            for buffer in negated:
                buffer.copy_(buffer.to(torch.float32))
        torch._foreach_mul_(negated, [-step for step in _trust_steps(self._stored(params), negated, group)])
        torch._foreach_add_(params, negated)

    def _negated_directions(self, group, params, grads, states):
        """Scratch buffers holding ``-m_hat/(sqrt(v_hat) + eps)``, the moments updated, by torch's fused Adam.

        The kernel writes ``d -= lr_k/(1-b1^t) * m/(sqrt(v)/sqrt(1-b2^t) + eps_k)`` into zeroed buffers ``d``;
        lr_k and eps_k are chosen so that this is MXNet's (optionally bias-corrected) direction.
        """
        scratch = self.__dict__.setdefault("_scratch", {})  # reused every step, kept out of the state_dict
        negated = [scratch[p] if p in scratch else scratch.setdefault(p, torch.empty_like(p)) for p in params]
        torch._foreach_zero_(negated)
        beta1, beta2 = _f32(group["beta1"]), _f32(group["beta2"])
        for step, index in _by_step(states).items():
            root2 = math.sqrt(1.0 - beta2 ** step)
            lr = 1.0 if group["bias_correction"] else (1.0 - beta1 ** step) / root2
            eps = _f32(group["epsilon"]) / (1.0 if group["bias_correction"] else root2)
            torch._fused_adam_(
                _pick(negated, index), _pick(grads, index), _pick(_buffers(states, "mean"), index),
                _pick(_buffers(states, "var"), index), [], [_step_tensor(step, params[0].device)] * len(index),
                lr=lr, beta1=beta1, beta2=beta2, weight_decay=0.0, eps=eps, amsgrad=False, maximize=False)
        return negated


def _f32_norms(tensors, square_in_float=False):
    """L2 norms as float32 values, as MXNet's multi_lamb_update takes them: ``sqrt`` of multi_sum_sq's float sums.

    float64 CPU tensors replay multi_sum_sq exactly (one float accumulator per tensor, in element order; see
    ``migrate.optim._kernels``); others take torch's norm rounded to float32, ~1e-7 relative from MXNet's, within
    float32's own rounding. ``square_in_float``: the values are float32 numbers (MXNet's float32 direction buffer).
    """
    if any(t.dtype in _HALF for t in tensors):
        return [_round32(math.sqrt(half_sum_sq(t))) if t.dtype in _HALF else _f32_norms([t], square_in_float)[0]
                for t in tensors]
    if tensors[0].dtype == torch.float64 and _kernels.available(*tensors):
        sums = _kernels.sum_sqs([_kernels.flat(t) for t in tensors], square_in_float)
        return [_round32(math.sqrt(total)) for total in sums.tolist()]
    return [_round32(norm) for norm in torch.stack(torch._foreach_norm(tensors)).tolist()]


def half_sum_sq(tensor):
    """MXNet's CPU multi_sum_sq of one float16 (or bfloat16) tensor: each square rounded to the tensor's dtype
    (mshadow's half arithmetic: float product, rounded), summed in element order into a C float."""
    if not tensor.numel():
        return 0.0
    squares = (tensor.detach() * tensor.detach()).to("cpu", torch.float32).reshape(-1).numpy()
    return float(np.cumsum(squares, dtype=np.float32)[-1])  # cumsum adds in order, unlike the pairwise sum


def _trust_steps(params, direction, group):
    """Per-parameter ``-lr * r1/r2`` (or ``-lr`` when a norm is 0), r1 bounded as MXNet's multi_lamb does."""
    r1 = _f32_norms(params)
    r2 = _f32_norms(direction, square_in_float=True)
    lr, lower, upper = _round32(group["lr"]), group["lower_bound"], group["upper_bound"]  # lrs: a tuple
    steps = []
    for w_norm, g_norm in zip(r1, r2):
        if lower is not None and lower >= 0:
            w_norm = max(w_norm, _f32(lower))
        if upper is not None and upper >= 0:
            w_norm = min(w_norm, _f32(upper))
        steps.append(-lr if w_norm == 0 or g_norm == 0 else -lr * _round32(w_norm / g_norm))
    return steps


class Signum(_MXNetOptimizer):
    """MXNet ``signum``: ``m = mu*m - (1-mu)*(wd*w + clip(rescale_grad*g)); w = (1 - lr*wd_lh)*w + lr*sign(m)``.

    With ``momentum=0`` it is MXNet's signsgd_update: ``w = (1 - lr*wd)*w - lr*sign(g)`` (raw gradient).

    Example:
        >>> opt = Signum(model.parameters(), lr=0.01, momentum=0.9, wd_lh=0.0)
    """

    _hyper = {"momentum": 0.9, "wd_lh": 0.0}

    def _new_state(self, param, group):
        return SGD._new_state(self, param, group)

    def _update(self, group, params, grads, states):
        lr, wd, mom = _f32(group["lr"]), _f32(group["weight_decay"]), _f32(group["momentum"])
        if mom <= 0:  # signsgd_update: the raw gradient's sign; rescale, clip and wd_lh play no part
            signs = torch._foreach_sign(grads)
            torch._foreach_mul_(params, 1.0 - lr * wd)
            torch._foreach_add_(params, signs, alpha=-lr)
            return
        grads = self._scaled(grads, group)
        wd_lh = _f32(group["wd_lh"]) if group["wd_lh"] else 0.0
        for piece in _pieces((params, grads, _buffers(states, "momentum_buffer"))):
            _signum_piece(*piece, lr, wd, mom, wd_lh)


def _signum_piece(weight, grad, moment, lr, wd, mom, wd_lh):
    """MXNet's signum_update on one piece: ``m = mu*m - (1-mu)*(wd*w + g); w = (1 - lr*wd_lh)*w + lr*sign(m)``."""
    moment.mul_(mom)
    moment.add_(weight, alpha=-(1.0 - mom) * wd)
    moment.add_(grad, alpha=-(1.0 - mom))
    signs = moment.sign()
    if wd_lh:
        weight.mul_(1.0 - lr * wd_lh)
    weight.add_(signs, alpha=lr)


class Ftrl(_MXNetOptimizer):
    """MXNet ``ftrl``: FTRL-proximal with L1 ``lamda1``, ``beta`` and L2 ``wd``; weights are recomputed from z, n.

    Contiguous CPU float32/float64 tensors take one compiled pass of MXNet's FtrlUpdateKernel
    (``migrate.optim._kernels``, bit for bit ``ftrl_update``); others a torch path in another order of operations
    (~1e-7 relative per step).

    Example:
        >>> opt = Ftrl(model.parameters(), lr=0.1, lamda1=0.01, beta=1.0)
    """

    _hyper = {"lamda1": 0.01, "beta": 1.0}
    _state_names = ("z", "n")

    def _update(self, group, params, grads, states):
        hyper = tuple(_f32(group[key]) for key in ("lr", "weight_decay", "lamda1", "beta"))
        clip = _f32(group["clip_gradient"]) if _clips(group) else -1.0
        rows = [row for row in zip(params, grads, _buffers(states, "z"), _buffers(states, "n"))
                if not _kernels.run_in_place(_kernels.ftrl_update, row, *hyper, _f32(group["rescale_grad"]), clip)]
        if rows:  # CUDA, non-contiguous or half-precision tensors: the torch path
            params, grads, zs, ns = (list(column) for column in zip(*rows))
            for piece in _pieces((params, self._scaled(grads, group), zs, ns)):
                _ftrl_piece(*piece, *hyper)


def _ftrl_piece(weight, grad, z, n, lr, wd, lamda1, beta):
    """MXNet's FTRL kernel on one piece, in nine torch passes (another order of operations: ~1e-7 relative).

    ``z += g - (sqrt(n + g^2) - sqrt(n))*w/lr; n += g^2``, then the weight
    ``(sign(z)*lamda1 - z)/((beta + sqrt(n))/lr + wd)`` where ``|z| > lamda1``, else 0, written as
    ``-softshrink(z, lamda1)*lr/(sqrt(n) + beta + lr*wd)``.
    """
    sigma = n.sqrt()
    n.addcmul_(grad, grad)
    root = n.sqrt()
    sigma.sub_(root)
    z.addcmul_(sigma, weight, value=1.0 / lr)
    z.add_(grad)
    root.add_(beta + lr * wd)
    if lamda1 >= 0:
        shrunk = torch.nn.functional.softshrink(z, lamda1)
    else:  # |z| > lamda1 everywhere
        shrunk = z - torch.sign(z) * lamda1
    torch.addcdiv(_zero(weight), shrunk, root, value=-lr, out=weight)


_ZEROS = {}


def _zero(like):
    """A 0-dim zero of ``like``'s dtype on its device: ``addcdiv(zero, a, b, value, out=w)`` writes ``value*a/b`` into
    ``w`` in one pass (a CPU zero would not do on CUDA)."""
    key = (like.dtype, like.device)
    if key not in _ZEROS:
        _ZEROS[key] = torch.zeros((), dtype=like.dtype, device=like.device)
    return _ZEROS[key]


OPTIMIZERS = {"sgd": SGD, "nag": NAG, "adam": Adam, "rmsprop": RMSProp, "adagrad": AdaGrad,
              "adadelta": AdaDelta, "adamax": Adamax, "nadam": Nadam, "lamb": LAMB, "signum": Signum, "ftrl": Ftrl}

from migrate.optim import exact_more  # noqa: E402  (it builds on the classes above)

OPTIMIZERS.update(exact_more.OPTIMIZERS)

from migrate.optim import exact_rare  # noqa: E402  (lbsgd, sgld, dcasgd, groupadagrad)

OPTIMIZERS.update(exact_rare.OPTIMIZERS)
