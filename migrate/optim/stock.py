"""The closest stock torch.optim optimizer for each MXNet optimizer, and the list of what differs."""
import torch

from migrate.errors import UnsupportedOptimizerError

_COMMON = {
    "rescale": "MXNet multiplies gradients by rescale_grad={scale} before the update; scale the torch loss by it "
               "(or use a mean loss when it is 1/batch_size)",
    "clip": "MXNet clips each gradient element to +-{clip} after rescaling; call "
            "torch.nn.utils.clip_grad_value_(params, {clip}) before optimizer.step()",
    "float32": "MXNet's kernels round lr, wd and the other hyperparameters to float32; torch uses them in double",
    "multi_precision": "MXNet (multi_precision) updates a float32 master copy of each float16 weight and rounds it "
                       "into the weight; stock torch.optim updates the float16 weights themselves (use "
                       "migrate.torch_optimizer, which keeps float32 masters)",
}


def stock_optimizer(name, groups, options):
    """(optimizer, differences) for MXNet optimizer ``name`` over ``groups`` with MXNet ``options``.

    Raises:
        UnsupportedOptimizerError: ``test``, which has no stock counterpart.
    """
    if name not in _BUILDERS:
        raise UnsupportedOptimizerError(f"MXNet's {name!r} optimizer (w += rescale_grad * g, lr ignored) has no "
                                        f"stock torch.optim counterpart; use migrate.torch_optimizer (exact)")
    optimizer, differences = _BUILDERS[name](groups, dict(options))
    if options["rescale_grad"] != 1.0:
        differences.append(_COMMON["rescale"].format(scale=options["rescale_grad"]))
    if options["clip_gradient"] is not None and options["clip_gradient"] > 0:
        differences.append(_COMMON["clip"].format(clip=options["clip_gradient"]))
    differences.append(_COMMON["float32"])
    if options.get("multi_precision"):
        differences.append(_COMMON["multi_precision"])
    return optimizer, differences


def _sgd(groups, o):
    diffs = []
    if o.get("momentum", 0.0):
        diffs.append("MXNet keeps lr inside the momentum (m = mu*m - lr*g; w += m), torch outside "
                     "(b = mu*b + g; w -= lr*b): equal at constant lr; after an lr change scale each momentum "
                     "buffer by lr_old/lr_new")
    return torch.optim.SGD(groups, lr=o["lr"], momentum=o.get("momentum", 0.0), weight_decay=o["weight_decay"],
                           foreach=True), diffs


def _nag(groups, o):
    diffs = []
    if o.get("momentum", 0.0):
        diffs.append("MXNet keeps lr inside the NAG momentum (torch outside): equal at constant lr; after an lr "
                     "change scale each momentum buffer by lr_old/lr_new")
        if o["weight_decay"]:
            diffs.append("MXNet's NAG adds wd times the already-updated weight to its momentum; torch adds wd "
                         "times the weight before the step")
    return torch.optim.SGD(groups, lr=o["lr"], momentum=o.get("momentum", 0.0), nesterov=o.get("momentum", 0) > 0,
                           weight_decay=o["weight_decay"], foreach=True), diffs


def _adam(groups, o):
    return torch.optim.Adam(groups, lr=o["lr"], betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)),
                            eps=o.get("epsilon", 1e-8), weight_decay=o["weight_decay"], foreach=True), [
        "MXNet adds epsilon to sqrt(v) before bias correction (torch after): set eps to epsilon/sqrt(1-beta2^t) "
        "before each step to match", "MXNet clips the gradient after adding wd*w (torch clips before)"]


def _rmsprop(groups, o):
    centered = o.get("centered", False)
    diffs = ["MXNet puts epsilon inside the sqrt (w -= lr*g/sqrt(n + eps)); torch outside"]
    if centered:
        diffs.append("MXNet centered RMSProp keeps lr inside the momentum delta (gamma2); torch outside")
    if o.get("clip_weights"):
        diffs.append(f"MXNet clips weights to +-{o['clip_weights']} after each step; torch does not")
    return torch.optim.RMSprop(groups, lr=o["lr"], alpha=o.get("gamma1", 0.9), eps=o.get("epsilon", 1e-8),
                               centered=centered, momentum=o.get("gamma2", 0.9) if centered else 0.0,
                               weight_decay=o["weight_decay"], foreach=True), diffs


def _adagrad(groups, o):
    _no_wd(groups)
    return torch.optim.Adagrad(groups, lr=o["lr"], initial_accumulator_value=o.get("eps", 1e-7), eps=0.0,
                               weight_decay=0.0, foreach=True), [
        "MXNet's AdaGrad weight decay is decoupled (w -= lr*wd*w): weight_decay set to 0 here; apply "
        "w *= 1 - lr*wd before each step"]


def _adadelta(groups, o):
    _no_wd(groups)
    for group in groups:
        group["lr"] = 1.0
    return torch.optim.Adadelta(groups, lr=1.0, rho=o.get("rho", 0.9), eps=o.get("epsilon", 1e-5),
                                weight_decay=0.0, foreach=True), [
        "MXNet's AdaDelta ignores lr, lr_mult and schedules (lr fixed to 1.0 here)",
        "MXNet's AdaDelta weight decay is decoupled and not scaled by lr (w -= wd*w): weight_decay set to 0 here"]


def _adamax(groups, o):
    return torch.optim.Adamax(groups, lr=o["lr"], betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)), eps=0.0,
                              weight_decay=o["weight_decay"], foreach=True), [
        "MXNet clips the gradient after adding wd*w (torch clips before)"]


def _nadam(groups, o):
    return torch.optim.NAdam(groups, lr=o["lr"], betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)),
                             eps=o.get("epsilon", 1e-8), momentum_decay=o.get("schedule_decay", 0.004),
                             weight_decay=o["weight_decay"], foreach=True), [
        "MXNet's Nadam shares one momentum schedule across all parameters, advanced once per parameter update "
        "(so it depends on their count); torch keeps one per parameter"]


def _lamb(groups, o):
    return torch.optim.AdamW(groups, lr=o["lr"], betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)),
                             eps=o.get("epsilon", 1e-6), weight_decay=o["weight_decay"], foreach=True), [
        "LAMB has no torch counterpart: AdamW lacks the layer-wise trust ratio ||w||/||g|| and applies weight "
        "decay outside the normalized direction"]


def _signum(groups, o):
    return torch.optim.SGD(groups, lr=o["lr"], momentum=o.get("momentum", 0.9), weight_decay=o["weight_decay"],
                           foreach=True), [
        "Signum has no torch counterpart: SGD steps along the momentum itself, not its sign, and ignores wd_lh"]


def _ftrl(groups, o):
    _no_wd(groups)
    return torch.optim.Adagrad(groups, lr=o["lr"], weight_decay=0.0, foreach=True), [
        "FTRL has no torch counterpart: Adagrad has no L1 shrinkage (lamda1), no beta and no proximal form; "
        "weight decay set to 0 here"]


def _ftml(groups, o):
    return torch.optim.Adam(groups, lr=o["lr"], betas=(o.get("beta1", 0.6), o.get("beta2", 0.999)),
                            eps=o.get("epsilon", 1e-8), weight_decay=o["weight_decay"], foreach=True), [
        "FTML has no torch counterpart: Adam (same betas) steps along a bias-corrected mean, FTML sets the weight "
        "to -z/d from its accumulated z and d"]


def _lars(groups, o):
    optimizer, diffs = _sgd(groups, o)
    which = "of each weight (not of biases and norm parameters)" if o.get("by_name") else "of every parameter"
    return optimizer, diffs + ["LARS has no torch counterpart: SGD lacks the layer-wise trust ratio "
                               f"eta*||w||/(||g|| + wd*||w|| + eps) that scales the lr {which}"]


def _lbsgd(groups, o):
    optimizer, diffs = _sgd(groups, o)
    return optimizer, diffs + [
        f"LBSGD has no torch counterpart: SGD steps every call, LBSGD sums gradients over batch_scale="
        f"{o.get('batch_scale', 1)} calls and steps on every batch_scale-th with their mean, its lr multiplied by "
        f"the {o.get('warmup_strategy', 'linear')!r} warmup factor (or, for 'lars', the layer's trust ratio)"]


def _sgld(groups, o):
    for group in groups:  # MXNet steps by lr/2: halve each group's lr and the lr_mult the lr scheduler reads
        group["lr"] = group["lr"] / 2
        if "lr_mult" in group:
            group["lr_mult"] = group["lr_mult"] / 2
    return torch.optim.SGD(groups, lr=o["lr"] / 2, weight_decay=o["weight_decay"], foreach=True), [
        "SGLD has no torch counterpart: this SGD takes its deterministic step w -= lr/2*(g + wd*w) (lr and lr_mult "
        "halved here) but adds no Langevin noise; add torch.randn_like(w) * sqrt(lr) to each weight after each "
        "step, or use migrate's exact SGLD (its noise source is pluggable)"]


def _dcasgd(groups, o):
    return torch.optim.SGD(groups, lr=o["lr"], momentum=o.get("momentum", 0.0), weight_decay=o["weight_decay"],
                           foreach=True), [
        "DCASGD has no torch counterpart: SGD lacks its delay compensation lamda*g*g*(w - w_previous) "
        f"(lamda={o.get('lamda', 0.04)})"]


def _groupadagrad(groups, o):
    return torch.optim.Adagrad(groups, lr=o["lr"], initial_accumulator_value=o.get("eps", 1e-5), eps=0.0,
                               weight_decay=0.0, foreach=True), [
        "GroupAdaGrad has no torch counterpart: torch Adagrad keeps one history per element (sum of g^2), "
        "GroupAdaGrad one per row (sum of the row's mean g^2), so rows step by other amounts"]


def _no_wd(groups):
    for group in groups:
        group["weight_decay"] = 0.0


_BUILDERS = {"sgd": _sgd, "nag": _nag, "adam": _adam, "rmsprop": _rmsprop, "adagrad": _adagrad,
             "adadelta": _adadelta, "adamax": _adamax, "nadam": _nadam, "lamb": _lamb, "signum": _signum,
             "ftrl": _ftrl, "ftml": _ftml, "lars": _lars, "lbsgd": _lbsgd, "sgld": _sgld, "dcasgd": _dcasgd,
             "groupadagrad": _groupadagrad}
