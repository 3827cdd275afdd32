"""Pure-python copies of MXNet 1.9.1's lr schedulers (mxnet/lr_scheduler.py), float for float.

They keep MXNet's state (FactorScheduler multiplies ``base_lr`` step by step) so every value matches MXNet's
to the last bit, which the float32 rounding of MXNet's kernels would otherwise amplify.
"""
import math

from migrate.errors import SettingsError

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
        while num_update > self.count + self.step:
            self.count += self.step
            self.base_lr *= self.factor
            if self.base_lr < self.stop_factor_lr:
                self.base_lr = self.stop_factor_lr
        return self.base_lr


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
    try:
        schedule = _SCHEDULES[kind](**kwargs)
    except TypeError as err:
        raise SettingsError(f"settings['lr_scheduler'] ({kind}) has arguments {sorted(kwargs)} that do not fit "
                            f"MXNet's {kind}: {err}; re-export the settings") from None
    learning_rate = settings["optimizer"].get("learning_rate")
    if learning_rate is not None and schedule.base_lr != learning_rate:
        schedule.base_lr = learning_rate  # what mxnet.optimizer.Optimizer.__init__ does, and only that
    return schedule
