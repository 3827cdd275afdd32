"""Pure-python copies of MXNet 1.9.1's lr schedulers (mxnet/lr_scheduler.py), float for float.

They keep MXNet's state (FactorScheduler multiplies ``base_lr`` step by step) so every value matches MXNet's
to the last bit, which the float32 rounding of MXNet's kernels would otherwise amplify.

``check_schedule`` refuses what MXNet's constructors refuse and what MXNet itself cannot compute (a Poly or Cosine
schedule whose decay has zero length divides by zero at ``max_update``; a negative ``pwr`` raises 0 to a negative
power there); everything MXNet computes is computed the same way. Every loop is bounded: FactorScheduler jumps over
the steps once the rate has settled (``stop_factor_lr``, or factor 1), and stops with an error past
``MAX_FACTOR_STEPS`` multiplications.
"""
import math
import numbers

from migrate.errors import LrSchedulerError, SettingsError

_WARMUP = ("warmup_steps", "warmup_begin_lr", "warmup_mode")


class _Schedule:
    """Base: warmup shared by every MXNet scheduler."""

    def __init__(self, base_lr=0.01, warmup_steps=0, warmup_begin_lr=0, warmup_mode="linear"):
        self.base_lr = base_lr
        self.warmup_steps = warmup_steps
        self.warmup_final_lr = base_lr
        self.warmup_begin_lr = warmup_begin_lr
        self.warmup_mode = warmup_mode

    def _warmup(self, num_update):
        if self.warmup_mode == "linear":
            increase = (self.warmup_final_lr - self.warmup_begin_lr) * float(num_update) / float(self.warmup_steps)
            return self.warmup_begin_lr + increase
        return self.warmup_begin_lr


class FactorScheduler(_Schedule):
    """MXNet FactorScheduler: ``base_lr`` times ``factor`` every ``step`` updates, not below ``stop_factor_lr``."""

    def __init__(self, step, factor=1, stop_factor_lr=1e-8, **kwargs):
        super().__init__(**kwargs)
        self.step, self.factor, self.stop_factor_lr, self.count = step, factor, stop_factor_lr, 0

    def __call__(self, num_update):
        if num_update < self.warmup_steps:
            return self._warmup(num_update)
        for _ in range(MAX_FACTOR_STEPS):
            if num_update <= self.count + self.step:
                return self.base_lr
            lr = max(self.base_lr * self.factor, self.stop_factor_lr)  # MXNet: multiply, then clamp from below
            if _same_float(lr, self.base_lr) and isinstance(self.step, int) and isinstance(self.count, int):
                self.count += self.step * -(-(num_update - self.count - self.step) // self.step)  # settled: jump
                return self.base_lr
            self.count += self.step
            self.base_lr = lr
        if num_update <= self.count + self.step:
            return self.base_lr
        raise LrSchedulerError(f"settings['lr_scheduler'] (FactorScheduler step {self.step}, factor {self.factor}): "
                               f"reaching update {num_update} needs more than {MAX_FACTOR_STEPS:,} multiplications "
                               f"of the lr before it settles at stop_factor_lr {self.stop_factor_lr}; check step, "
                               f"factor and the settings' num_update")


class MultiFactorScheduler(_Schedule):
    """MXNet MultiFactorScheduler: ``base_lr`` times ``factor`` after each update count in ``step``."""

    def __init__(self, step, factor=1, **kwargs):
        super().__init__(**kwargs)
        self.step, self.factor, self.cur_step_ind, self.count = list(step), factor, 0, 0

    def __call__(self, num_update):
        if num_update < self.warmup_steps:
            return self._warmup(num_update)
        while self.cur_step_ind <= len(self.step) - 1 and num_update > self.step[self.cur_step_ind]:
            self.count = self.step[self.cur_step_ind]
            self.cur_step_ind += 1
            self.base_lr *= self.factor
        return self.base_lr


class _DecayToFinal(_Schedule):
    """Base of Poly and Cosine: after warmup, ``final_lr + (base_lr_orig - final_lr) * shape`` up to ``max_update``."""

    def __init__(self, max_update, final_lr=0, **kwargs):
        super().__init__(**kwargs)
        self.base_lr_orig, self.max_update, self.final_lr = self.base_lr, max_update, final_lr
        self.max_steps = max_update - self.warmup_steps

    def __call__(self, num_update):
        if num_update < self.warmup_steps:
            return self._warmup(num_update)
        if num_update <= self.max_update:
            shape = self._shape(num_update - self.warmup_steps, self.max_steps)
            self.base_lr = self.final_lr + (self.base_lr_orig - self.final_lr) * shape
        return self.base_lr


class PolyScheduler(_DecayToFinal):
    """MXNet PolyScheduler: polynomial decay of power ``pwr`` to ``final_lr`` over ``max_update`` updates."""

    def __init__(self, max_update, pwr=2, final_lr=0, **kwargs):
        super().__init__(max_update, final_lr, **kwargs)
        self.power = pwr

    def _shape(self, done, total):
        return pow(1 - float(done) / float(total), self.power)


class CosineScheduler(_DecayToFinal):
    """MXNet CosineScheduler: half-cosine decay to ``final_lr`` over ``max_update`` updates."""

    @staticmethod
    def _shape(done, total):
        return (1 + math.cos(math.pi * done / total)) / 2


def _same_float(a, b) -> bool:
    """``a`` and ``b`` are the same float, sign of zero included."""
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


_SCHEDULES = {cls.__name__: cls for cls in (FactorScheduler, MultiFactorScheduler, PolyScheduler, CosineScheduler)}


def mx_schedule(settings):
    """The MXNet schedule ``num_update -> lr`` of ``settings`` (None when it has no lr_scheduler)."""
    spec = settings.get("lr_scheduler")
    if not spec:
        return None
    kwargs = dict(spec)
    kind = kwargs.pop("type", None)
    if kind not in _SCHEDULES:
        raise SettingsError(f"settings['lr_scheduler'] has type {kind!r}; expected one of {sorted(_SCHEDULES)}")
    check_schedule(spec)
    try:
        schedule = _SCHEDULES[kind](**kwargs)
    except TypeError as err:
        raise SettingsError(f"settings['lr_scheduler'] ({kind}) has arguments {sorted(kwargs)} that do not fit "
                            f"MXNet's {kind}: {err}; re-export the settings") from None
    learning_rate = settings["optimizer"].get("learning_rate")
    if learning_rate is not None and schedule.base_lr != learning_rate:
        schedule.base_lr = learning_rate  # what mxnet.optimizer.Optimizer.__init__ does, and only that
    return schedule


MAX_FACTOR_STEPS = 10_000_000
_INT_LIMIT = 2 ** 63  # MXNet counts updates in a Python int; beyond int64 float(num_update) loses every digit


def check_schedule(spec: dict) -> None:
    """Refuse an lr_scheduler entry MXNet would refuse, or could not compute, before anything is built from it.

    Args:
        spec: The settings' ``lr_scheduler`` entry: ``type`` and MXNet's constructor arguments.

    Raises:
        LrSchedulerError: an argument has the wrong type, is not finite, or is out of MXNet's range (the message
            names the scheduler, the argument, the value and what MXNet accepts).

    Examples:
        >>> check_schedule({"type": "PolyScheduler", "max_update": 10, "warmup_steps": 10, "base_lr": 0.1})
        Traceback (most recent call last):
        LrSchedulerError: settings['lr_scheduler'] (PolyScheduler): max_update 10 equals warmup_steps ...
    """
    kind = spec.get("type")
    checks = dict(_ARGUMENTS, **({"step": _STEP[kind]} if kind in _STEP else {}))
    for name, (valid, expected) in checks.items():
        if name in spec and name in _TAKES.get(kind, ()) + ("base_lr",) + _WARMUP and not valid(spec[name]):
            raise LrSchedulerError(f"settings['lr_scheduler'] ({kind}): {name} must be {expected}, got "
                                   f"{spec[name]!r:.80}; re-export the settings from a valid mx.lr_scheduler")
    steps = spec.get("step")
    if kind == "MultiFactorScheduler" and isinstance(steps, list) and any(b <= a for a, b in zip(steps, steps[1:])):
        raise LrSchedulerError(f"settings['lr_scheduler'] (MultiFactorScheduler): step {steps!r:.80} must be "
                               f"increasing (MXNet refuses it); re-export the settings")
    if kind in ("PolyScheduler", "CosineScheduler") and spec.get("max_update") == spec.get("warmup_steps", 0):
        raise LrSchedulerError(f"settings['lr_scheduler'] ({kind}): max_update {spec.get('max_update')} equals "
                               f"warmup_steps, so the decay has length 0 and MXNet's own {kind} divides by zero at "
                               f"update {spec.get('max_update')}; give max_update > warmup_steps")
    if kind == "PolyScheduler" and spec.get("pwr", 2) < 0:
        raise LrSchedulerError(f"settings['lr_scheduler'] (PolyScheduler): pwr {spec['pwr']} is negative, so MXNet's "
                               f"own PolyScheduler raises 0 to a negative power at update {spec.get('max_update')}; "
                               f"give pwr >= 0")


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _count(low):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v < _INT_LIMIT


_ARGUMENTS = {  # argument -> (valid, what MXNet accepts)
    "base_lr": (_real, "a finite number"),
    "factor": (lambda v: _real(v) and v <= 1, "a finite number <= 1 (MXNet refuses a factor above 1)"),
    "stop_factor_lr": (_real, "a finite number"),
    "final_lr": (_real, "a finite number"),
    "pwr": (_real, "a finite number"),
    "max_update": (_count(1), "an integer >= 1 (MXNet asserts an int)"),
    "warmup_steps": (_count(0), "an integer >= 0 (MXNet asserts an int)"),
    "warmup_begin_lr": (_real, "a finite number"),
    "warmup_mode": (lambda v: v in ("linear", "constant"), "'linear' or 'constant'"),
}
_STEP = {"FactorScheduler": (lambda v: _real(v) and 1 <= v < _INT_LIMIT, "a number >= 1 (updates between decays)"),
         "MultiFactorScheduler": (lambda v: isinstance(v, list) and len(v) > 0 and all(
             _real(s) and 1 <= s < _INT_LIMIT for s in v), "a non-empty list of numbers >= 1")}
_TAKES = {"FactorScheduler": ("step", "factor", "stop_factor_lr"), "MultiFactorScheduler": ("step", "factor"),
          "PolyScheduler": ("max_update", "pwr", "final_lr"), "CosineScheduler": ("max_update", "final_lr")}
