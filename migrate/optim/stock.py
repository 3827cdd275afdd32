"""The closest stock torch.optim optimizer for each MXNet optimizer, and the list of what differs.

Each optimizer's record (``migrate.optim.registry``) builds its stock counterpart and names what differs in its
update; the differences every optimizer shares (rescale_grad, clipping, float32 hyperparameters, multi_precision)
are added here.
"""
from migrate.errors import UnsupportedOptimizerError
from migrate.optim.registry import record

__all__ = ["stock_optimizer"]

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

    Args:
        name: The MXNet optimizer's name.
        groups: torch param groups (``migrate.param_groups``); a builder may adjust them (a decoupled weight decay
            set to 0).
        options: MXNet's options: ``lr``, ``weight_decay``, ``rescale_grad``, ``clip_gradient``, the
            hyperparameters and ``multi_precision``.

    Returns:
        The stock ``torch.optim`` optimizer and the sentences naming what differs from MXNet.

    Raises:
        UnsupportedOptimizerError: ``name`` has no stock counterpart (``test``) or no record.

    Examples:
        >>> opt, differences = stock_optimizer("sgd", [{"params": params}], options)  # doctest: +SKIP
    """
    entry = record(name)
    if entry.stock_optimizer is None:
        raise UnsupportedOptimizerError(f"MXNet's {name!r} optimizer has no stock torch.optim counterpart; use "
                                        f"migrate.torch_optimizer (exact), which replays it")
    optimizer, differences = entry.stock_optimizer(groups, dict(options))
    if options["rescale_grad"] != 1.0:
        differences.append(_COMMON["rescale"].format(scale=options["rescale_grad"]))
    if options["clip_gradient"] is not None and options["clip_gradient"] > 0:
        differences.append(_COMMON["clip"].format(clip=options["clip_gradient"]))
    differences.append(_COMMON["float32"])
    if options.get("multi_precision"):
        differences.append(_COMMON["multi_precision"])
    return optimizer, differences
