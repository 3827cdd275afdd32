"""The AdaGrad family of MXNet 1.9.1 optimizers (per-element rates from accumulated squared gradients):
``adagrad``, ``groupadagrad``, ``adadelta``, ``rmsprop`` and ``ftrl``, each an exact torch optimizer, its stock
counterpart and its state converters.

rmsprop and ftrl are MXNet C++ kernels (float32 hyperparameters, replayed by compiled loops on CPU); adagrad,
adadelta and groupadagrad (``mxnet.optimizer.contrib``) are written in python in MXNet (python-double scalars).
"""
import torch

from migrate.errors import UnsupportedOptimizerError
from migrate.optim import compiled
from migrate.optim.base import (MXNetOptimizer, cache_pieces, cached_on_cpu, clip_bound, compiled_on, decayed_grads,
                                kernel_float, pick, python_scaled, state_buffers)
from migrate.optim.registry import OptimizerRecord, register

__all__ = ["AdaDelta", "AdaGrad", "Ftrl", "GroupAdaGrad", "RMSProp"]


class RMSProp(MXNetOptimizer):
    """MXNet ``rmsprop``: eps inside the sqrt; centered (Graves) keeps lr inside the momentum ``delta``.

    Examples:
        >>> opt = RMSProp(model.parameters(), lr=1e-3, gamma1=0.9, gamma2=0.9, centered=True)
    """

    hyperparameters = {"gamma1": 0.9, "gamma2": 0.9, "epsilon": 1e-8, "centered": False, "clip_weights": None}
    state_names = ("n", "g", "delta")
    capturable_supported = True
    state_layouts = (("n",), ("n", "g", "delta"))  # plain, centered

    def _new_state(self, param, group):
        names = self.state_layouts[1] if group["centered"] else self.state_layouts[0]
        state = {"step": 0}
        state.update({name: torch.zeros_like(param, memory_format=torch.preserve_format) for name in names})
        return state

    def _update(self, group, params, grads, states):
        lr, gamma1 = kernel_float(group["lr"]), kernel_float(group["gamma1"])
        gamma2, eps, rescale = (kernel_float(group[key]) for key in ("gamma2", "epsilon", "rescale_grad"))
        clip = clip_bound(group)
        clip_w = kernel_float(group["clip_weights"]) if group["clip_weights"] else -1.0
        centered = group["centered"]
        names = self.state_layouts[1] if centered else self.state_layouts[0]
        rows = [(p, g, *(s[name] for name in names)) for p, g, s in zip(params, grads, states)]
        def consts(kind):  # RMSPropAlexUpdateKernel's also hold gamma2
            head = [kind(rescale), kind(clip), kind(gamma1)] + ([kind(gamma2)] if centered else [])
            return head + [kind(1) - kind(gamma1), kind(eps), kind(clip_w)]

        left = compiled.update("rmspropalex" if centered else "rmsprop", rows, [lr] * len(rows),
                               [kernel_float(group["weight_decay"])] * len(rows), consts, clip >= 0, compiled_on(group))
        if not left:
            return
        params, grads, states = pick(params, left), pick(grads, left), pick(states, left)  # CUDA, strided, half
        grads = decayed_grads(grads, params, group)
        n = state_buffers(states, "n")
        torch._foreach_mul_(n, gamma1)
        torch._foreach_addcmul_(n, grads, grads, value=1.0 - gamma1)
        if group["centered"]:
            gbar, delta = state_buffers(states, "g"), state_buffers(states, "delta")
            torch._foreach_mul_(gbar, gamma1)
            torch._foreach_add_(gbar, grads, alpha=1.0 - gamma1)
            denom = torch._foreach_addcmul(n, gbar, gbar, value=-1.0)
            torch._foreach_add_(denom, kernel_float(group["epsilon"]))
        else:
            denom = torch._foreach_add(n, kernel_float(group["epsilon"]))
        torch._foreach_sqrt_(denom)
        if group["centered"]:
            torch._foreach_mul_(delta, kernel_float(group["gamma2"]))
            torch._foreach_addcdiv_(delta, grads, denom, value=-lr)
            torch._foreach_add_(params, delta)
        else:
            torch._foreach_addcdiv_(params, grads, denom, value=-lr)
        if group["clip_weights"]:
            clip = kernel_float(group["clip_weights"])
            torch._foreach_clamp_min_(params, -clip)
            torch._foreach_clamp_max_(params, clip)


class AdaGrad(MXNetOptimizer):
    """MXNet ``adagrad``: ``h += clip(rescale_grad*g)^2; w -= lr*(g/sqrt(h + eps) + wd*w)`` (decoupled wd).

    Examples:
        >>> opt = AdaGrad(model.parameters(), lr=0.01, eps=1e-7)
    """

    hyperparameters = {"eps": 1e-7}
    state_names = ("history",)
    capturable_counterpart = "torch.optim.Adagrad"

    def _update(self, group, params, grads, states):
        grads, hyper = self._scaled(grads, group), (group["lr"], group["weight_decay"], group["eps"])
        columns = (params, grads, state_buffers(states, "history"))
        if cached_on_cpu(params, group):  # every pass over a cache-sized piece while it is in cache
            for piece in cache_pieces(columns):
                _adagrad_update([[tensor] for tensor in piece], *hyper)
        else:
            _adagrad_update(columns, *hyper)


def _adagrad_update(columns, lr, wd, eps):
    """MXNet's adagrad update on lists (weights, grads, histories), python-double hyperparameters as MXNet's python
    AdaGrad: ``h += g*g; w -= lr*(g/sqrt(h + eps) + wd*w)``."""
    weights, grads, histories = columns
    torch._foreach_addcmul_(histories, grads, grads)
    denom = torch._foreach_add(histories, eps)
    torch._foreach_sqrt_(denom)
    if wd:
        step = torch._foreach_div(grads, denom)
        torch._foreach_add_(step, weights, alpha=wd)
        torch._foreach_add_(weights, step, alpha=-lr)
    else:
        torch._foreach_addcdiv_(weights, grads, denom, value=-lr)


class GroupAdaGrad(MXNetOptimizer):
    """MXNet ``groupadagrad`` (mxnet.optimizer.contrib.GroupAdaGrad), AdaGrad with one history per row.

    For a 2-D weight: ``g = clip(rescale_grad*grad)`` (clipped whenever clip_gradient is set);
    ``h += mean(g^2, axis=1)`` (``state["history"]``, shape ``(rows, 1)``); ``w -= lr*g / sqrt(h + eps)``.

    Raises:
        UnsupportedOptimizerError: a trained parameter is not 2-D, or has weight decay: MXNet refuses both
            (``assert len(weight.shape) == 2``, ``assert wd == 0``).

    Examples:
        >>> opt = GroupAdaGrad(embedding.parameters(), lr=0.1, eps=1e-5)
    """

    hyperparameters = {"eps": 1e-5}
    state_names = ("history",)
    capturable_counterpart = "torch.optim.Adagrad"

    def __init__(self, params, lr, **kwargs):
        super().__init__(params, lr, **kwargs)
        for group in self.param_groups:
            if group.get("frozen"):
                continue
            names = group.get("mx_names") or [f"parameter {i}" for i in range(len(group["params"]))]
            wrong = [f"{name} {tuple(p.shape)}" for name, p in zip(names, group["params"]) if p.dim() != 2]
            if wrong:
                raise UnsupportedOptimizerError(f"groupadagrad updates 2-D weights only (one history per row), got "
                                                f"{wrong[:5]}; MXNet refuses these too: freeze them or use adagrad")
            if group["weight_decay"] != 0.0:
                raise UnsupportedOptimizerError(f"groupadagrad has no weight decay (MXNet asserts wd == 0) but "
                                                f"{names[:5]} have wd {group['weight_decay']!r}; set wd (or "
                                                f"wd_mult) to 0")

    def _new_state(self, param, group):
        # (rows, 1), sharded as the parameter's rows for a DTensor
        return {"step": 0, "history": torch.zeros_like(param[:, :1], memory_format=torch.contiguous_format)}

    def _update(self, group, params, grads, states):
        for weight, grad, state in zip(params, grads, states):
            grad = python_scaled(grad, group)
            history = state["history"]
            history.add_(grad.square().mean(dim=1, keepdim=True))
            weight.sub_(grad.mul_(group["lr"]).div_(history.add(group["eps"]).sqrt_()))


def _row_state_shape(param):
    """GroupAdaGrad's history shape: one value per row, ``(rows, 1)`` (no layout change from MXNet's)."""
    return (param.shape[0], 1)


class AdaDelta(MXNetOptimizer):
    """MXNet ``adadelta``: lr is ignored entirely; ``w -= delta + wd*w`` (wd not scaled by lr).

    Examples:
        >>> opt = AdaDelta(model.parameters(), lr=1.0, rho=0.9, epsilon=1e-5)
    """

    hyperparameters = {"rho": 0.9, "epsilon": 1e-5}
    state_names = ("acc_g", "acc_delta")
    capturable_supported = True

    def _update(self, group, params, grads, states):
        grads, hyper = self._scaled(grads, group), (group["rho"], group["epsilon"], group["weight_decay"])
        columns = (params, grads, state_buffers(states, "acc_g"), state_buffers(states, "acc_delta"))
        if cached_on_cpu(params, group):
            for piece in cache_pieces(columns):
                _adadelta_update([[tensor] for tensor in piece], *hyper)
        else:
            _adadelta_update(columns, *hyper)


def _adadelta_update(columns, rho, eps, wd):
    """MXNet's adadelta update on lists (weights, grads, acc_g, acc_delta):
    ``delta = sqrt(acc_delta + eps)/sqrt(acc_g + eps)*g``; ``w -= delta + wd*w``."""
    weights, grads, acc_g, acc_delta = columns
    torch._foreach_mul_(acc_g, rho)
    torch._foreach_addcmul_(acc_g, grads, grads, value=1.0 - rho)
    delta = torch._foreach_add(acc_delta, eps)
    torch._foreach_sqrt_(delta)
    denom = torch._foreach_add(acc_g, eps)
    torch._foreach_sqrt_(denom)
    torch._foreach_div_(delta, denom)
    torch._foreach_mul_(delta, grads)
    torch._foreach_mul_(acc_delta, rho)
    torch._foreach_addcmul_(acc_delta, delta, delta, value=1.0 - rho)
    torch._foreach_add_(delta, weights, alpha=wd)
    torch._foreach_sub_(weights, delta)


class Ftrl(MXNetOptimizer):
    """MXNet ``ftrl``: FTRL-proximal with L1 ``lamda1``, ``beta`` and L2 ``wd``; weights are recomputed from z, n.

    Contiguous CPU float32/float64 tensors take one compiled pass of MXNet's FtrlUpdateKernel
    (``mxupdate.kernels.ftrl``, bit for bit ``ftrl_update``); others torch's multi-tensor ops in another order
    of operations (~1e-7 relative per step).

    Examples:
        >>> opt = Ftrl(model.parameters(), lr=0.1, lamda1=0.01, beta=1.0)
    """

    hyperparameters = {"lamda1": 0.01, "beta": 1.0}
    state_names = ("z", "n")
    capturable_counterpart = "torch.optim.Adagrad"

    def _update(self, group, params, grads, states):
        lr, wd, lamda1, beta = (kernel_float(group[key]) for key in ("lr", "weight_decay", "lamda1", "beta"))
        rescale, clip = kernel_float(group["rescale_grad"]), clip_bound(group)
        zs, ns = state_buffers(states, "z"), state_buffers(states, "n")
        left = compiled.update("ftrl", list(zip(params, grads, zs, ns)), [lr] * len(params), [wd] * len(params),
                               lambda kind: [kind(rescale), kind(clip), kind(lamda1), kind(beta), kind(0)], clip >= 0,
                               compiled_on(group))
        if left:  # CUDA, strided, half (or compiled=False): torch's multi-tensor ops
            _ftrl_torch(pick(params, left), self._scaled(pick(grads, left), group), pick(zs, left), pick(ns, left), lr,
                        wd, lamda1, beta)


def _ftrl_torch(weights, grads, zs, ns, lr, wd, lamda1, beta):
    """MXNet's FTRL kernel with torch's multi-tensor ops, in another order of operations (~1e-7 relative):

    ``z += g - (sqrt(n + g^2) - sqrt(n))*w/lr; n += g^2``, then the weight
    ``(sign(z)*lamda1 - z)/((beta + sqrt(n))/lr + wd)`` where ``|z| > lamda1``, else 0, written as
    ``-softshrink(z, lamda1)*lr/(sqrt(n) + beta + lr*wd)`` (``softshrink(z) = z - clamp(z, -lamda1, lamda1)``).
    """
    sigma = torch._foreach_sqrt(ns)
    torch._foreach_addcmul_(ns, grads, grads)
    root = torch._foreach_sqrt(ns)
    torch._foreach_sub_(sigma, root)
    torch._foreach_addcmul_(zs, sigma, weights, value=1.0 / lr)
    torch._foreach_add_(zs, grads)
    torch._foreach_add_(root, beta + lr * wd)
    if lamda1 >= 0:
        shrunk = torch._foreach_clamp_min(zs, -lamda1)
        torch._foreach_clamp_max_(shrunk, lamda1)
        torch._foreach_neg_(shrunk)
        torch._foreach_add_(shrunk, zs)
    else:  # |z| > lamda1 everywhere
        shrunk = torch._foreach_sign(zs)
        torch._foreach_mul_(shrunk, -lamda1)
        torch._foreach_add_(shrunk, zs)
    torch._foreach_zero_(weights)
    torch._foreach_addcdiv_(weights, shrunk, root, value=-lr)


# ---------------------------------------------------------------- stock counterparts and their state


def _no_wd(groups):
    """Set every group's weight_decay to 0 (MXNet's decoupled wd has no stock counterpart)."""
    for group in groups:
        group["weight_decay"] = 0.0


def _rmsprop_stock_optimizer(groups, o):
    centered = o.get("centered", False)
    diffs = ["MXNet puts epsilon inside the sqrt (w -= lr*g/sqrt(n + eps)); torch outside"]
    if centered:
        diffs.append("MXNet centered RMSProp keeps lr inside the momentum delta (gamma2); torch outside")
    if o.get("clip_weights"):
        diffs.append(f"MXNet clips weights to +-{o['clip_weights']} after each step; torch does not")
    return torch.optim.RMSprop(groups, lr=o["lr"], alpha=o.get("gamma1", 0.9), eps=o.get("epsilon", 1e-8),
                               centered=centered, momentum=o.get("gamma2", 0.9) if centered else 0.0,
                               weight_decay=o["weight_decay"], foreach=True), diffs


def _adagrad_stock_optimizer(groups, o):
    _no_wd(groups)
    return torch.optim.Adagrad(groups, lr=o["lr"], initial_accumulator_value=o.get("eps", 1e-7), eps=0.0,
                               weight_decay=0.0, foreach=True), [
        "MXNet's AdaGrad weight decay is decoupled (w -= lr*wd*w): weight_decay set to 0 here; apply "
        "w *= 1 - lr*wd before each step"]


def _groupadagrad_stock_optimizer(groups, o):
    return torch.optim.Adagrad(groups, lr=o["lr"], initial_accumulator_value=o.get("eps", 1e-5), eps=0.0,
                               weight_decay=0.0, foreach=True), [
        "GroupAdaGrad has no torch counterpart: torch Adagrad keeps one history per element (sum of g^2), "
        "GroupAdaGrad one per row (sum of the row's mean g^2), so rows step by other amounts"]


def _adadelta_stock_optimizer(groups, o):
    _no_wd(groups)
    for group in groups:
        group["lr"] = 1.0
    return torch.optim.Adadelta(groups, lr=1.0, rho=o.get("rho", 0.9), eps=o.get("epsilon", 1e-5),
                                weight_decay=0.0, foreach=True), [
        "MXNet's AdaDelta ignores lr, lr_mult and schedules (lr fixed to 1.0 here)",
        "MXNet's AdaDelta weight decay is decoupled and not scaled by lr (w -= wd*w): weight_decay set to 0 here"]


def _ftrl_stock_optimizer(groups, o):
    _no_wd(groups)
    return torch.optim.Adagrad(groups, lr=o["lr"], weight_decay=0.0, foreach=True), [
        "FTRL has no torch counterpart: Adagrad has no L1 shrinkage (lamda1), no beta and no proximal form; "
        "weight decay set to 0 here"]


def _rmsprop_stock_state(given):
    """n -> square_avg and, centered, g -> grad_avg and delta -> ``momentum_buffer = -delta / lr``."""
    step, arrays = given.step, given.arrays
    if len(arrays) == 1:  # plain
        return {"step": step, "square_avg": arrays[0]}, []
    if given.lr == 0.0:
        return {"step": step, "square_avg": arrays[0], "grad_avg": arrays[1]}, [
            f"{given.mx_name}: MXNet's centered RMSProp delta was not converted (its next lr is 0, and torch's "
            f"momentum buffer is MXNet's delta divided by -lr); torch restarts it from zero"]
    return {"step": step, "square_avg": arrays[0], "grad_avg": arrays[1],
            "momentum_buffer": arrays[2] / -given.lr}, []


def _adagrad_stock_state(given):
    """history -> ``sum = history + eps`` (the stock Adagrad holds MXNet's eps in its initial accumulator)."""
    return {"step": given.step, "sum": given.arrays[0] + float(given.hyper.get("eps", 1e-7))}, []


def _groupadagrad_stock_state(given):
    return {}, ["MXNet's GroupAdaGrad row histories were not converted: torch Adagrad's per-element sum has another "
                "meaning; it restarts from its initial accumulator (eps)"]


def _adadelta_stock_state(given):
    return {"step": given.step, "square_avg": given.arrays[0], "acc_delta": given.arrays[1]}, []


def _ftrl_stock_state(given):
    return {"step": given.step, "sum": given.arrays[1]}, [
        "MXNet's FTRL z (the accumulated proximal gradient) was not converted: torch Adagrad has no counterpart"]


register(OptimizerRecord("rmsprop", RMSProp, ("rmsprop", "rmspropalex"), torch.optim.RMSprop, _rmsprop_stock_optimizer,
                         _rmsprop_stock_state))
register(OptimizerRecord("adagrad", AdaGrad, (), torch.optim.Adagrad, _adagrad_stock_optimizer,
                         _adagrad_stock_state))
register(OptimizerRecord("groupadagrad", GroupAdaGrad, (), torch.optim.Adagrad, _groupadagrad_stock_optimizer,
                         _groupadagrad_stock_state, state_shape=_row_state_shape))
register(OptimizerRecord("adadelta", AdaDelta, (), torch.optim.Adadelta, _adadelta_stock_optimizer,
                         _adadelta_stock_state))
register(OptimizerRecord("ftrl", Ftrl, ("ftrl",), torch.optim.Adagrad, _ftrl_stock_optimizer,
                         _ftrl_stock_state))
