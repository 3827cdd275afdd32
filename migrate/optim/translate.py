"""torch optimizers and lr schedulers that train the way an MXNet 1.9.1 ``gluon.Trainer`` did."""
import warnings
from typing import NamedTuple

import torch

from migrate.optim import stock
from migrate.optim.registry import record
from migrate.optim.schedules import mx_schedule
from mxformats.settings import as_settings
from migrate import arguments
from migrate.errors import SettingsError, UnsupportedOptimizerError
from migrate.optim.groups import base_lr, param_groups


class StockTranslation(NamedTuple):
    """What ``stock_torch_optimizer`` returns: a stock torch optimizer and how it differs from MXNet."""

    optimizer: torch.optim.Optimizer
    differences: list


def torch_optimizer(torch_model, settings, mapping, exact=True, rescale_grad=None, unmapped="error"):
    """The torch optimizer for ``torch_model`` that continues the MXNet training described by ``settings``.

    One of migrate's optimizers that reproduce MXNet 1.9.1's update operators (the exact class of the optimizer's
    record, ``migrate.optim.registry``: every optimizer MXNet registers): rescale_grad, clip_gradient, lr_mult/wd_mult
    groups, frozen parameters and float32 hyperparameters included; with the settings' ``multi_precision`` each
    float16/bfloat16 parameter keeps a float32 master copy (``state["master"]``), as MXNet keeps for float16.
    Frozen parameters get ``requires_grad=False`` (``ParamGroups.apply_frozen``) and sit in groups with
    ``frozen=True``, which these optimizers skip (their state, once converted, waits for an unfreeze:
    ``migrate.TorchControl``). For the closest stock ``torch.optim`` optimizer use ``stock_torch_optimizer``.

    Args:
        torch_model: The torch model to train.
        settings: The settings document (dict) or a path to the settings file.
        mapping: MXNet parameter name -> torch state_dict key (``migrate.NameMapping`` or any Mapping).
        exact: Kept for older callers: False returns ``stock_torch_optimizer(...).optimizer`` and warns with the
            differences (a ``UserWarning``); use ``stock_torch_optimizer`` instead.
        rescale_grad: Factor applied to every gradient before clipping; None takes the settings' value
            (``1/batch_size`` after ``trainer.step(batch_size)``). Pass 1.0 if your torch loss is already a mean.
        unmapped: Policy for torch parameters without MXNet source, as in ``param_groups``.

    Returns:
        The ``torch.optim.Optimizer``.

    Raises:
        UnsupportedOptimizerError: The settings' optimizer or one of its hyperparameters has no translation.
        SettingsError: The settings lack a key.
        MappingError: The mapping is not a name -> name mapping, or does not fit the settings or the model.
        ModelTypeError: ``torch_model`` is not a ``torch.nn.Module`` instance.
        ArgumentError: ``rescale_grad`` is not None or a finite number > 0, or ``exact`` is not a bool.

    Examples:
        >>> opt = torch_optimizer(model, "settings.json", mapping)
        >>> sched = torch_lr_scheduler(opt, "settings.json")

    Note:
        Call ``scheduler.step()`` after each ``optimizer.step()``: the lr of step k is MXNet's
        ``schedule(num_update + k) * lr_mult``.
        Under ``DistributedDataParallel``, wrap the model AFTER this call: it sets ``requires_grad=False`` on frozen
        parameters, and a DDP wrapper built before that averages no gradients on the first step. DDP averages the
        ranks' gradients, so with a loss summed per rank pass ``rescale_grad=1 / per_rank_batch``.
    """
    if not arguments.flag(exact, "torch_optimizer(exact=...)"):
        translation = stock_torch_optimizer(torch_model, settings, mapping, rescale_grad, unmapped)
        warnings.warn(f"torch_optimizer(exact=False) is stock_torch_optimizer(...).optimizer; it differs from "
                      f"MXNet: {' '.join(translation.differences)}", UserWarning, stacklevel=2)
        return translation.optimizer
    settings, groups, options = _prepared(torch_model, settings, mapping, rescale_grad, unmapped, "torch_optimizer")
    return record(settings["optimizer"]["name"]).exact_class(groups, **options)


def stock_torch_optimizer(torch_model, settings, mapping, rescale_grad=None, unmapped="error") -> StockTranslation:
    """The closest stock ``torch.optim`` optimizer (foreach) to the MXNet training in ``settings``, and what differs.

    Args:
        torch_model: As for ``torch_optimizer``.
        settings: As for ``torch_optimizer``.
        mapping: As for ``torch_optimizer``.
        rescale_grad: As for ``torch_optimizer``.
        unmapped: As for ``torch_optimizer``.

    Returns:
        A ``StockTranslation`` ``(optimizer, differences)``; ``differences`` is a list of sentences, empty when none.

    Raises:
        UnsupportedOptimizerError, SettingsError, MappingError, ModelTypeError, ArgumentError: as for
            ``torch_optimizer``.

    Examples:
        >>> opt, differences = stock_torch_optimizer(model, "settings.json", mapping)
        >>> filled, lost = convert_stock_optimizer_state("trainer.states", "settings.json", mapping, opt)

    Note:
        ``migrate.convert_stock_optimizer_state`` fills its state from MXNet's saved states where they have the same
        meaning, and lists what does not cross.
    """
    settings, groups, options = _prepared(torch_model, settings, mapping, rescale_grad, unmapped,
                                          "stock_torch_optimizer")
    return StockTranslation(*stock.stock_optimizer(settings["optimizer"]["name"], groups, options))


def _prepared(torch_model, settings, mapping, rescale_grad, unmapped, caller) -> tuple:
    """(settings, param groups with the frozen parameters applied, optimizer options) for a translation; every
    argument checked before the model changes (``caller`` names the function in messages)."""
    arguments.torch_model(torch_model, f"{caller}(torch_model)")
    rescale_grad = arguments.rescale_grad(rescale_grad, f"{caller}(rescale_grad)")
    settings = as_settings(settings, SettingsError)
    record(settings["optimizer"]["name"])  # UnsupportedOptimizerError for a name with no translation
    groups = param_groups(torch_model, settings, mapping, unmapped=unmapped)
    options = _options(settings, rescale_grad)
    groups.apply_frozen(torch_model)
    return settings, groups, options


def _options(settings, rescale_grad):
    """Optimizer-wide keyword arguments (MXNet names) from the settings, checked against the optimizer's."""
    optimizer = settings["optimizer"]
    hyper = {k: v for k, v in optimizer["hyperparameters"].items() if k not in ("multi_precision",)}
    allowed = record(optimizer["name"]).exact_class.hyperparameters
    unknown = sorted(set(hyper) - set(allowed))
    if unknown:
        raise UnsupportedOptimizerError(f"optimizer {optimizer['name']!r} hyperparameters {unknown} have no "
                                        f"translation; supported: {sorted(allowed)}")
    scale = optimizer["rescale_grad"] if rescale_grad is None else rescale_grad
    return dict(hyper, lr=base_lr(settings), weight_decay=float(optimizer["wd"]), rescale_grad=float(scale),
                clip_gradient=optimizer.get("clip_gradient"),
                multi_precision=bool(optimizer.get("multi_precision") or optimizer["hyperparameters"].get(
                    "multi_precision")))


class MXNetLRScheduler(torch.optim.lr_scheduler.LRScheduler):
    """Sets each group's lr to MXNet's ``schedule(num_update) * lr_mult`` before every optimizer step (0 for a group
    with ``frozen=True``; a stock ``torch.optim.Adadelta`` keeps lr 1.0: MXNet's AdaDelta uses no learning rate).

    Args:
        optimizer: The optimizer whose groups it drives (groups from ``param_groups`` carry ``lr_mult``).
        schedule: A callable ``num_update -> lr`` (MXNet's scheduler), or None for a constant ``base_lr``.
        base_lr: MXNet's base learning rate (used for groups without ``lr_mult``: lr_mult = initial lr / base_lr).
        num_update: MXNet's update count already done; the next ``optimizer.step()`` is update ``num_update + 1``.

    Examples:
        >>> sched = MXNetLRScheduler(opt, lambda t: 0.1 * 0.5 ** (t // 100), base_lr=0.1)
    """

    def __init__(self, optimizer, schedule, base_lr, num_update=0):
        self.schedule, self.base_lr, self.num_update = schedule, base_lr, num_update
        super().__init__(optimizer)

    def get_lr(self):
        """Learning rates of the next optimizer step, one per group."""
        if isinstance(self.optimizer, torch.optim.Adadelta):  # MXNet's AdaDelta has no lr: the stock one keeps 1.0
            return [0.0 if group.get("frozen") else 1.0 for group in self.optimizer.param_groups]
        count = self.num_update + self.last_epoch + 1
        if getattr(self.optimizer, "lr_before_count", False):  # LBSGD: its first update of a step reads count-1
            before = self.schedule(count - 1) if self.schedule is not None else self.base_lr
            for group in self.optimizer.param_groups:
                group["lr_before_count"] = 0.0 if group.get("frozen") else before * self._lr_mult(group)
        lr = self.schedule(count) if self.schedule is not None else self.base_lr
        return [0.0 if group.get("frozen") else lr * self._lr_mult(group) for group in self.optimizer.param_groups]

    def _lr_mult(self, group):
        return group["lr_mult"] if "lr_mult" in group else group["initial_lr"] / self.base_lr


def torch_lr_scheduler(optimizer, settings, num_update=None):
    """The torch lr scheduler that follows the settings' MXNet lr scheduler (or constant lr when it has none).

    Args:
        optimizer: The optimizer from ``torch_optimizer`` (or any optimizer over ``param_groups``).
        settings: The settings document (dict) or a path to the settings file.
        num_update: MXNet updates already done. None: the largest update count in the optimizer's state (set by
            ``convert_optimizer_state``), else the settings' ``num_update``.

    Returns:
        A ``MXNetLRScheduler``; call its ``step()`` after every ``optimizer.step()``.

    Raises:
        SettingsError: The settings' lr_scheduler is not one of MXNet's Factor, MultiFactor, Poly, Cosine.
        ArgumentError: ``optimizer`` is not a ``torch.optim.Optimizer``.

    Examples:
        >>> sched = torch_lr_scheduler(opt, "settings.json")
    """
    arguments.torch_optimizer(optimizer, "torch_lr_scheduler(optimizer)")
    settings = as_settings(settings, SettingsError)
    if num_update is None:
        counts = [int(s["step"]) for s in optimizer.state.values() if isinstance(s, dict) and "step" in s]
        num_update = max(counts) if counts else int(settings["num_update"])
    if not isinstance(num_update, int) or isinstance(num_update, bool) or not 0 <= num_update < 2 ** 63:
        raise SettingsError(f"torch_lr_scheduler got num_update {num_update!r:.40}; expected an integer in "
                            f"[0, 2**63), MXNet's count of updates done")
    return MXNetLRScheduler(optimizer, mx_schedule(settings), base_lr(settings), num_update=num_update)
