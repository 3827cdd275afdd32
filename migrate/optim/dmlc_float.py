"""A float hyperparameter as an MXNet 1.9.1 operator receives it, computed without MXNet.

MXNet hands an operator's scalar ``float`` parameters (``lr=``, ``wd=``, ``momentum=``, ``rescale_grad=``, ...) to
its C++ side as ``str(value)``, and dmlc-core parses that text with its own ``dmlc::stof``
(``dmlc/strtonum.h``, ``ParseFloat<float, true>``), which is not correctly rounded: for some values it lands one
unit in the last place away from ``np.float32(value)`` (2.0201059743896793e-05 for one). ``mx_float32`` replays that
parser on ``repr(value)`` operation by operation in float32 (numpy scalars round every operation as C ``float`` does),
so migrate's exact optimizers use the value MXNet's kernels use, where mxnet is not installed.

Tuple parameters (``lrs=``/``wds=`` of ``multi_sgd_update`` and ``multi_lamb_update``) go through C++ streams and
NDArray parameters through numpy: both are correctly rounded, ``np.float32(value)``.

The scalar of an NDArray's arithmetic with a python number (``grad * 0.5``, ``history + eps``: ``_mul_scalar``,
``_plus_scalar``, ...), what MXNet's python optimizers compute with, is a C ``double`` parsed by the same parser in
double (``dmlc::stod``, ``ParseFloat<double>``), not correctly rounded either (``0.38120423768821243`` for one), then
cast to the array's dtype: ``mx_float64`` replays it.
"""
import functools
import math

import numpy as np

_MAX_DIGITS = 19  # dmlc's kStrtofMaxDigits: fraction digits beyond it are ignored
#: Per parsed type: (kMaxExponent, kMaxSignificandForMaxExponent, kMaxSignificandForNegMaxExponent)
_LIMITS = {np.float32: (38, np.float32(3.402823466), np.float32(1.175494351)),
           np.float64: (308, 1.797693134862315708, 2.225073858507201383)}


def mx_float32(value) -> np.float32:
    """``value`` (a real number) as dmlc's ``stof(str(value))`` parses it: the float32 an MXNet kernel computes with.

    Raises:
        OverflowError: MXNet would refuse the value (dmlc's stof raises ``out_of_range`` beyond float32's range).

    Examples:
        >>> mx_float32(2.0201059743896793e-05) == np.nextafter(np.float32(2.0201059743896793e-05), np.float32(1))
        True
    """
    return _parsed(float(value), np.float32)  # a float key: a tensor changed in place must not hit a stale entry


def mx_float64(value) -> float:
    """``value`` (a real number) as dmlc's ``stod(str(value))`` parses it: the double an NDArray's arithmetic with a
    python number takes (MXNet's python optimizers: ``grad * rescale_grad``, ``history + eps``, ...), before the cast
    to the array's dtype.

    Raises:
        OverflowError: MXNet would refuse the value (beyond float64's range).

    Examples:
        >>> mx_float64(0.38120423768821243), mx_float64(0.1)
        (0.3812042376882124, 0.1)
    """
    return float(_parsed(float(value), np.float64))


@functools.lru_cache(maxsize=4096)
def _parsed(value: float, kind):
    if math.isnan(value) or math.isinf(value):
        return kind(value)
    return _parse(repr(value), kind)


def _parse(text: str, kind):
    """dmlc's ParseFloat<kind, true> on the decimal ``text`` (python's repr of a finite float), every operation in
    ``kind`` (numpy float32 or float64 scalars round each one as C does)."""
    negative = text.startswith("-")
    text = text.lstrip("+-")
    mantissa, _, exponent = text.lower().partition("e")
    whole, _, fraction = mantissa.partition(".")
    value = kind(float(int(whole or "0")))  # (float) of a uint64: whole parts of repr have at most 16 digits
    if fraction:
        digits = fraction[:_MAX_DIGITS]
        value = kind(value + kind(float(int(digits)) / float(10 ** len(digits))))  # double quotient, cast, add
    if exponent:
        value = _scaled(text, value, exponent, kind)
    return -value if negative else value


def _scaled(text, value, exponent, kind):
    """``value`` times (or divided by) 10 to the ``exponent`` (its text), as dmlc scales: by 1e8, then by 10."""
    scaled_down = exponent.startswith("-")
    expon = int(exponent.lstrip("+-"))
    most, largest, smallest = _LIMITS[kind]
    name = np.dtype(kind).name
    if expon > most:
        raise OverflowError(f"{text!r}: exponent beyond {name}'s, MXNet's parser raises out_of_range")
    if expon == most and ((not scaled_down and value > largest) or (scaled_down and value < smallest)):
        raise OverflowError(f"{text!r}: beyond {name}'s range, MXNet's parser raises out_of_range")
    scale = kind(1.0)
    while expon >= 8:
        scale, expon = kind(scale * kind(1e8)), expon - 8
    while expon > 0:
        scale, expon = kind(scale * kind(10.0)), expon - 1
    with np.errstate(over="ignore", under="ignore"):
        return kind(value / scale) if scaled_down else kind(value * scale)
