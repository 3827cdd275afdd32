"""Runs of the exact optimizers shared by the multi-tensor tests (CPU) and the GPU tests: every exact optimizer on
seeded tensors with seeded gradients, on any device and dtype, on the compiled kernels or on torch's multi-tensor
path (``compiled=False``, the path CUDA tensors take).

No model and no backward: each step's gradients are drawn on the CPU from a seeded generator and copied to the
device, so every run of a case sees the same numbers whatever the device. Two param groups (the second at twice the
lr and without weight decay), weight decay, ``rescale_grad`` and clipping.
"""
import torch

from migrate.optim import OPTIMIZERS

SHAPES = ((20, 15), (15,), (7, 3), (1, 9))
OPTIONS = {"weight_decay": 0.01, "rescale_grad": 0.5, "clip_gradient": 0.8}
#: case -> (MXNet optimizer, its torch arguments beyond OPTIONS). Every exact optimizer (sgd and nag with and
#: without momentum, rmsprop plain and centered, signum with and without momentum).
CASES = {
    "sgd": ("sgd", {"lr": 0.05, "momentum": 0.9}),
    "sgd-plain": ("sgd", {"lr": 0.05}),
    "nag": ("nag", {"lr": 0.05, "momentum": 0.9}),
    "nag-plain": ("nag", {"lr": 0.05}),
    "adam": ("adam", {"lr": 0.01}),
    "rmsprop": ("rmsprop", {"lr": 0.01}),
    "rmsprop-centered": ("rmsprop", {"lr": 0.01, "centered": True, "clip_weights": 2.0}),
    "adagrad": ("adagrad", {"lr": 0.05}),
    "adadelta": ("adadelta", {"lr": 1.0}),
    "adamax": ("adamax", {"lr": 0.01}),
    "nadam": ("nadam", {"lr": 0.01}),
    "lamb": ("lamb", {"lr": 0.01, "lower_bound": 0.1, "upper_bound": 10.0}),
    "signum": ("signum", {"lr": 0.005, "wd_lh": 0.01}),
    "signsgd": ("signum", {"lr": 0.005, "momentum": 0.0}),
    "ftrl": ("ftrl", {"lr": 0.1}),
    "ftml": ("ftml", {"lr": 0.01}),
    "lars": ("lars", {"lr": 0.1, "momentum": 0.9, "eta": 0.01, "eps": 1e-8}),
    "lbsgd": ("lbsgd", {"lr": 0.1, "momentum": 0.9, "batch_scale": 2, "warmup_strategy": "linear"}),
    "sgld": ("sgld", {"lr": 0.01}),
    "dcasgd": ("dcasgd", {"lr": 0.1, "lamda": 0.5}),
    "groupadagrad": ("groupadagrad", {"lr": 0.1, "weight_decay": 0.0}),
    "test": ("test", {"lr": 0.1}),
}
#: Cases whose update takes whole-tensor norms: the compiled path sums squares as MXNet's multi_sum_sq does (one
#: float accumulator per tensor, in order), torch's path in float64: they differ by the float32 rounding of those sums.
NORM_CASES = {"lamb", "lars"}


def start(seed=0):
    """The seeded float64 starting values of SHAPES (CPU)."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator, dtype=torch.float64) for shape in SHAPES]


def gradients(step, seed=0):
    """The seeded float64 gradients of ``step`` (CPU)."""
    generator = torch.Generator().manual_seed(1000 * seed + step + 1)
    return [torch.randn(shape, generator=generator, dtype=torch.float64) for shape in SHAPES]


def make(case, params, **extra):
    """The exact optimizer of ``case`` on two groups of ``params`` (the last two at twice the lr, no weight decay;
    groupadagrad: the 2-D ones only)."""
    name, kwargs = CASES[case]
    options = dict(OPTIONS, **kwargs, **extra)
    if name == "sgld":  # a noise that is the same on every device
        options["noise"] = lambda param, std: torch.full_like(param, 0.01 * std)
    trained = [p for p in params if p.dim() == 2] if name == "groupadagrad" else params
    groups = [{"params": trained[:2]}, {"params": trained[2:], "lr": options["lr"] * 2, "weight_decay": 0.0}]
    return OPTIMIZERS[name](groups, **options)


def run(case, steps, device="cpu", dtype=torch.float64, multi_precision=False, **extra):
    """The parameters (CPU, float64 copies) after ``steps`` steps of ``case`` on ``device`` in ``dtype``."""
    params = [torch.nn.Parameter(t.to(device=device, dtype=dtype)) for t in start()]
    optimizer = make(case, params, multi_precision=multi_precision, **extra)
    for step in range(steps):
        for param, grad in zip(params, gradients(step)):
            param.grad = grad.to(device=device, dtype=dtype)
        optimizer.step()
    return [p.detach().to("cpu", torch.float64) for p in params], optimizer
