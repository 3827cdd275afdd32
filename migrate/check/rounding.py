"""The rounding-aware rule of ``check_training``: when a tensor's difference between MXNet and torch counts.

Two float32 trainings of the same model with different kernels (summation orders, algorithms) differ by rounding,
and a deep net's training amplifies it: a ReLU input within rounding of 0 takes the other branch on one side, a
BatchNorm over few values per channel divides by a small variance. How far rounding moves each tensor is measured,
not guessed: two control runs train each framework against itself with every parameter multiplied by
``1 + PERTURBATION x noise`` (seeded, mean 0, variance 1: ``unit_noise``), and a tensor's control difference is the
larger of the two runs' differences from their unperturbed run (for a parameter, less the perturbation itself: how
far it carried through training). Both frameworks: a kernel can round worse in one of them (torch's BatchNorm
backward over 2 values per channel does), and MXNet's control alone then understates the noise.

``PERTURBATION`` is 1e-5, about 100 float32 rounding units, not one: rounding's rare events (a ReLU flip that moves
a gradient by a whole element's share) then happen in the control runs many times over instead of by chance, so the
control bounds them. At float32's own unit (1e-7, tutorial 4's control run) a control that happens to miss such an
event understates the difference: on resnet50_v1 against its generated module (4x3x112x112, three control seeds) the
largest difference / control beyond atol reached 11 at 1e-7 (4 tensors of the exact twin diverged), 6.2 at 1e-6 and
0.79 at 1e-5 (``bench/bench_check.py``, margins table). The price: the control overstates the smooth rounding of
early layers, so a difference must be larger there to count (the smallest cause in the tests, torch's unbiased
running variance on resnet18_v1's first BatchNorm, still lies over 100x above its control).

A tensor diverges when its difference exceeds ``max(atol x max(1, |MXNet|), NOISE_FACTOR x control)``; a tensor the
control runs leave unchanged (difference 0) keeps the ``atol`` rule alone. On exact twins (resnet18_v1 against
torchvision's over 3 steps, resnet50_v1 against its generated module at 64 and 32 pixels) every difference beyond
atol stays within 3x its control; the recognised causes lie over 100x above theirs (``tests/migrate/check/test_check.py``):
``NOISE_FACTOR`` 10 sits between.
"""
from __future__ import annotations

import numpy as np

from migrate.check.report import TensorCheck
from migrate.verification.nodes import max_diff

__all__ = ["NOISE_FACTOR", "NOT_FINITE", "PERTURBATION", "non_finite", "tensor_check", "unit_noise"]

PERTURBATION = 1e-5
"""The control runs' relative perturbation of every parameter (about 100 float32 rounding units)."""
NOISE_FACTOR = 10.0
"""k: a difference up to k times the control runs' difference is rounding."""
NOT_FINITE = "values not finite"
"""How a row whose values hold NaN or inf begins its note (``causes`` names where they come from)."""


def non_finite(value) -> str:
    """How many NaN and infinite values ``value`` holds, in words.

    Examples:
        >>> non_finite(np.array([np.nan, np.inf, 1.0, np.nan]))
        '2 NaN, 1 inf of 4'
    """
    array = np.asarray(value)
    if not np.issubdtype(array.dtype, np.floating):
        return f"0 NaN, 0 inf of {array.size}"
    return f"{int(np.isnan(array).sum())} NaN, {int(np.isinf(array).sum())} inf of {array.size}"


def unit_noise(rng: np.random.Generator, shape) -> np.ndarray:
    """Seeded float32 noise of mean 0 and variance 1: uniform in [-sqrt(3), sqrt(3)] (faster to draw than normal
    noise, and as good a perturbation).

    Examples:
        >>> float(abs(unit_noise(np.random.default_rng(0), (100000,)).var() - 1)) < 0.02
        True
    """
    return (rng.random(shape, dtype=np.float32) - np.float32(0.5)) * np.float32(2 * 3 ** 0.5)


def tensor_check(name, torch_name, kind, step, mx_value, torch_value, atol, controls=(None, None),
                 note="") -> TensorCheck:
    """The row of one tensor: MXNet's value against torch's, judged against ``atol`` and the control runs' values.

    Args:
        name, torch_name, kind, step: as ``TensorCheck``'s.
        mx_value: MXNet's value (torch's layout), or None when MXNet has none (not compared).
        torch_value: torch's value, or None (not compared).
        atol: the tolerance, relative above magnitude 1.
        controls: (the MXNet control run's value, the torch control run's value) of the tensor, in the layouts of
            ``mx_value`` and ``torch_value``; either None (no such control: the other alone, or the ``atol`` rule).
        note: how the row was compared.

    Returns:
        The ``TensorCheck``: ``control`` the larger of the two control differences, ``ok`` when the difference is at
        most ``limit``, ``rounding`` when only the control's allowance admits it.

    Examples:
        >>> tensor_check("fc_bias", "fc.bias", "weight", 1, np.ones(3), np.ones(3) + 2e-4, 1e-4,
        ...              controls=(np.ones(3) + 5e-5, None)).rounding
        True
    """
    if mx_value is None or torch_value is None:
        side = "MXNet value" if mx_value is None else "torch value"
        return TensorCheck(name, torch_name, kind, step, None, 0.0, True, f"not compared: {side} not found")
    diff, scale = _largest_difference(np.asarray(mx_value), np.asarray(torch_value))
    if np.isinf(diff) and np.size(mx_value) != np.size(torch_value):
        return TensorCheck(name, torch_name, kind, step, None, scale, False,
                           f"shapes differ: {np.shape(mx_value)} vs {np.shape(torch_value)}")
    if not (np.isfinite(diff) and np.isfinite(scale)):
        return TensorCheck(name, torch_name, kind, step, None, 0.0, False,
                           f"{NOT_FINITE} (MXNet: {non_finite(mx_value)}; torch: {non_finite(torch_value)})")
    noise = _control_difference((mx_value, torch_value), controls)
    plain = atol * max(1.0, scale)
    limit = max(plain, NOISE_FACTOR * noise) if noise is not None else plain
    return TensorCheck(name, torch_name, kind, step, diff, scale, diff <= limit, note, control=noise, limit=limit,
                       rounding=plain < diff <= limit)


def _control_difference(values, controls) -> float | None:
    """The larger of the finite differences between each run's value and its control's, or None (no control, or
    none finite)."""
    found = [_largest_difference(np.asarray(value), np.asarray(control))[0] for value, control in zip(values, controls)
             if control is not None and np.size(value) == np.size(control)]
    found = [d for d in found if np.isfinite(d)]
    return max(found) if found else None


def _largest_difference(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(largest ``|a - b|``, largest ``|a|``): in the arrays' own precision where their shapes agree (a float32
    difference is within half a float32 unit of the exact one, and exact where the values lie within a factor 2 of
    each other), else as ``max_diff`` reads ``b`` in ``a``'s layout."""
    if a.shape != b.shape:
        return max_diff(a, b)
    if not a.size:
        return 0.0, 0.0
    return float(np.max(np.abs(a - b))), float(np.max(np.abs(a)))
