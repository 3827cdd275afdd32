"""A float hyperparameter as an MXNet 1.9.1 operator receives it, computed without MXNet.

MXNet hands an operator's scalar ``float`` parameters (``lr=``, ``wd=``, ``momentum=``, ``rescale_grad=``, ...) to
its C++ side as ``str(value)``, and dmlc-core parses that text with its own ``dmlc::stof``
(``dmlc/strtonum.h``, ``ParseFloat<float, true>``), which is not correctly rounded: for some values it lands one
unit in the last place away from ``np.float32(value)`` (2.0201059743896793e-05 for one). ``mx_float32`` replays that
parser on ``repr(value)`` operation by operation in float32 (numpy scalars round every operation as C ``float`` does),
so migrate's exact optimizers use the value MXNet's kernels use, where mxnet is not installed.

Tuple parameters (``lrs=``/``wds=`` of ``multi_sgd_update`` and ``multi_lamb_update``) go through C++ streams and
NDArray parameters through numpy: both are correctly rounded, ``np.float32(value)``.
"""
import functools
import math

import numpy as np

_F = np.float32
_MAX_DIGITS = 19  # dmlc's kStrtofMaxDigits: fraction digits beyond it are ignored
_MAX_EXPONENT = 38
_MAX_SIGNIFICAND = _F(3.402823466)  # kMaxSignificandForMaxExponent (float)
_MIN_SIGNIFICAND = _F(1.175494351)  # kMaxSignificandForNegMaxExponent (float)


def mx_float32(value) -> np.float32:
    """``value`` (a real number) as dmlc's ``stof(str(value))`` parses it: the float32 an MXNet kernel computes with.

    Raises:
        OverflowError: MXNet would refuse the value (dmlc's stof raises ``out_of_range`` beyond float32's range).

    Examples:
        >>> mx_float32(2.0201059743896793e-05) == np.nextafter(np.float32(2.0201059743896793e-05), np.float32(1))
        True
    """
    return _parsed(float(value))  # a float key: a tensor changed in place must not hit a stale cache entry


@functools.lru_cache(maxsize=4096)
def _parsed(value: float) -> np.float32:
    if math.isnan(value):
        return _F("nan")
    if math.isinf(value):
        return _F(value)
    return _parse(repr(value))


def _parse(text: str) -> np.float32:
    """dmlc's ParseFloat<float, true> on the decimal ``text`` (python's repr of a finite float)."""
    negative = text.startswith("-")
    text = text.lstrip("+-")
    mantissa, _, exponent = text.lower().partition("e")
    whole, _, fraction = mantissa.partition(".")
    value = _F(float(int(whole or "0")))  # (float) of a uint64: whole parts of repr have at most 16 digits
    if fraction:
        digits = fraction[:_MAX_DIGITS]
        value = _F(value + _F(float(int(digits)) / float(10 ** len(digits))))  # double quotient, cast, float add
    if exponent:
        scaled_down = exponent.startswith("-")
        expon = int(exponent.lstrip("+-"))
        if expon > _MAX_EXPONENT:
            raise OverflowError(f"{text!r}: exponent beyond float32's, MXNet's parser raises out_of_range")
        if expon == _MAX_EXPONENT and ((not scaled_down and value > _MAX_SIGNIFICAND)
                                       or (scaled_down and value < _MIN_SIGNIFICAND)):
            raise OverflowError(f"{text!r}: beyond float32's range, MXNet's parser raises out_of_range")
        scale = _F(1.0)
        while expon >= 8:
            scale, expon = _F(scale * _F(1e8)), expon - 8
        while expon > 0:
            scale, expon = _F(scale * _F(10.0)), expon - 1
        with np.errstate(over="ignore", under="ignore"):
            value = _F(value / scale) if scaled_down else _F(value * scale)
    return -value if negative else value
