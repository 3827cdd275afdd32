"""Layer-wise learning-rate decay and discriminative multipliers, with depth read from the network's block tree.

The layers of a network, in the order its blocks run (Gluon registers children in the order ``Sequential`` runs them
and in which model code defines them), are found from the block tree, never from name lists for particular models:

- a Block that registers parameters itself (Dense, Conv2D, BatchNorm, Embedding, ...) is one layer;
- inside a ``Sequential``/``HybridSequential`` every composite child (a residual unit, a transformer block) is one
  layer, and nested sequentials are walked through;
- inside any other composite block (the model class itself), a composite child is one layer when a sibling has the
  same class (blocks registered one by one as attributes); other children are walked through;
- a norm layer right after another layer shares that layer's depth (conv + BatchNorm is one layer).

The layers are numbered 0 (input side) to ``depth_max`` (the head).
"""
import dataclasses
import math
import re
from collections import Counter

from mxnet import gluon
from mxnet.gluon import nn

from .errors import MultiplierError, ParamsTypeError, RuleMatchError
from .rules import NORM_BLOCKS, Rule

__all__ = ["DecayRule", "layer_groups", "layer_decay", "even_mults", "discriminative"]

_SEQUENTIAL = (nn.Sequential, nn.HybridSequential)


@dataclasses.dataclass(frozen=True)
class DecayRule(Rule):
    """A Rule made by ``layer_decay``/``discriminative``: it selects one layer group and records its depth.

    Args:
        select: As for Rule (here an ``re:`` pattern of the group's exact parameter names).
        lr_mult: The group's learning-rate multiplier.
        wd_mult: Left None (decay changes learning rates only).
        depth: The group's depth (0 = input side); ``explain()`` shows it.
        layer: A short name of the group's blocks, for ``explain()``.

    Examples:
        >>> rules = layer_decay(net, 0.65)
        >>> rules[-1].depth, rules[-1].lr_mult
        (12, 1.0)
    """

    depth: int = 0
    layer: str = ""

    def label(self, index: int) -> str:
        """How explain() names this rule: its position, its depth and its layer (not the long regex)."""
        return f"rules[{index}] depth {self.depth} [{self.layer}]"


def _own_params(block: gluon.Block) -> bool:
    """Whether ``block`` registers parameters itself."""
    return bool(block._reg_params)


def _units(block: gluon.Block, path: str) -> list:
    """(path, Block) of the layers below ``block``, in registration (= run) order, by the module docstring's rules."""
    if _own_params(block):
        return [(path, block)]
    classes = Counter(type(child) for child in block._children.values())
    units = []
    for key, child in block._children.items():
        where = f"{path}.{key}" if path else key
        composite = bool(child._children) and not _own_params(child) and not isinstance(child, _SEQUENTIAL)
        if composite and (isinstance(block, _SEQUENTIAL) or classes[type(child)] > 1):
            units.append((where, child))
        else:
            units += _units(child, where)
    return [(where, unit) for where, unit in units if unit.collect_params().keys()]


def layer_groups(net: gluon.Block, n_groups: int = None) -> list:
    """The network's layers grouped by depth, from the input side to the head.

    Args:
        net: The network (a Block).
        n_groups: If given, merge into this many groups in the manner of fastai: the head (the last layer) alone,
            the other layers split into ``n_groups - 1`` contiguous groups of near-equal size.

    Returns:
        A list of groups, each a list of Blocks; the last group is the head.

    Raises:
        ParamsTypeError: ``net`` is not a Block.
        RuleMatchError: the network has no layer with parameters, or fewer layers than ``n_groups``.

    Examples:
        >>> [len(g) for g in layer_groups(resnet18_v1())]   # stem (conv + bn), 8 residual units, output
        [2, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    """
    return [[block for _, block in group] for group in _grouped(net, n_groups)]


def _grouped(net: gluon.Block, n_groups) -> list:
    """``layer_groups`` with each Block paired with its path in the tree (``features.4.0``), for explain()."""
    if not isinstance(net, gluon.Block):
        raise ParamsTypeError(f"gluon_lr needs the network as a Block to find its layers, got "
                              f"{type(net).__name__}; pass the model (net), not net.collect_params().")
    groups = []
    for where, unit in _units(net, ""):
        if groups and isinstance(unit, NORM_BLOCKS):
            groups[-1].append((where or net.name, unit))
        else:
            groups.append([(where or net.name, unit)])
    if not groups:
        raise RuleMatchError(f"Block {net.name!r} has no layer with parameters; build or initialise the network "
                             f"before asking for its layers.")
    if n_groups is None:
        return groups
    if not isinstance(n_groups, int) or not 1 <= n_groups <= len(groups):
        raise RuleMatchError(f"n_groups must be an int from 1 to the number of layer groups of {net.name!r} "
                             f"({len(groups)}), got {n_groups!r}; pass fewer groups.")
    if n_groups == 1:
        return [[block for group in groups for block in group]]
    body, size = groups[:-1], len(groups) - 1
    bounds = [round(i * size / (n_groups - 1)) for i in range(n_groups)]
    return [[b for group in body[lo:hi] for b in group] for lo, hi in zip(bounds, bounds[1:])] + [groups[-1]]


def _rule(group: list, depth: int, lr_mult: float) -> DecayRule:
    """One rule selecting exactly the parameters of ``group``'s (path, Block) pairs."""
    names = [name for _, block in group for name in block.collect_params().keys()]
    pattern = "re:(?:" + "|".join(re.escape(name) for name in dict.fromkeys(names)) + ")"
    return DecayRule(pattern, lr_mult=lr_mult, depth=depth, layer="+".join(where for where, _ in group))


def layer_decay(net: gluon.Block, decay: float) -> list:
    """Rules giving the layer at depth d the lr multiplier ``decay ** (depth_max - d)``, the head 1.0.

    Args:
        net: The network; its layers and depths come from ``layer_groups(net)`` (its block tree).
        decay: The factor per layer, 0 < decay <= 1 (BEiT/ELECTRA-style fine-tuning uses 0.65-0.9).

    Returns:
        One ``DecayRule`` per depth, input side first; pass them as ``LrTrainer(..., rules=...)``. Rules given
        after them override them (e.g. a head rule), explicit ``set_lr_mult`` calls override all rules.

    Raises:
        ParamsTypeError: ``net`` is not a Block.
        MultiplierError: ``decay`` is not a number in (0, 1].
        RuleMatchError: the network has no layer with parameters.

    Examples:
        >>> trainer = LrTrainer(net, "adam", {"learning_rate": 1e-3}, rules=layer_decay(net, 0.75))
        >>> print(trainer.explain())   # the depth column shows each parameter's depth
    """
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 < decay <= 1:
        raise MultiplierError(f"layer_decay: decay must be a number in (0, 1], got {decay!r}; pass e.g. 0.75 (each "
                              f"layer below the head gets 0.75 times the multiplier of the layer above).")
    groups = _grouped(net, None)
    top = len(groups) - 1
    return [_rule(group, depth, float(decay) ** (top - depth)) for depth, group in enumerate(groups)]


def even_mults(lo: float, hi: float, n: int) -> list:
    """``n`` multipliers spaced geometrically from ``lo`` to ``hi`` (fastai's ``even_mults`` for ``slice(lo, hi)``).

    Args:
        lo: The first (input-side) multiplier, > 0.
        hi: The last (head) multiplier, > 0.
        n: How many, >= 1 (``[hi]`` for 1).

    Returns:
        The list ``lo * (hi / lo) ** (i / (n - 1))`` for i in 0..n-1.

    Raises:
        MultiplierError: ``lo`` or ``hi`` is not a finite number > 0, or ``n`` is not an int >= 1.

    Examples:
        >>> even_mults(0.01, 1.0, 3)
        [0.01, 0.1, 1.0]
    """
    for what, value in (("lo", lo), ("hi", hi)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise MultiplierError(f"even_mults: {what} must be a finite number > 0, got {value!r}; pass e.g. "
                                  f"lo=0.01, hi=1.0 as in fastai's slice(lo, hi).")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise MultiplierError(f"even_mults: n must be an int >= 1, got {n!r}; pass the number of layer groups.")
    if n == 1:
        return [float(hi)]
    return [float(lo) * (float(hi) / float(lo)) ** (i / (n - 1)) for i in range(n)]


def discriminative(net: gluon.Block, lo: float, hi: float, n_groups: int = 3) -> list:
    """Rules giving ``n_groups`` layer groups multipliers spaced geometrically from ``lo`` to ``hi`` (the head).

    fastai's ``lr=slice(lo, hi)``: the head alone is the last group, the other layers split into ``n_groups - 1``
    contiguous groups.

    Args:
        net: The network (a Block).
        lo: Multiplier of the input-side group.
        hi: Multiplier of the head.
        n_groups: Number of groups (fastai's CNN learner uses 3).

    Returns:
        One ``DecayRule`` per group (``depth`` = group index), input side first.

    Raises:
        ParamsTypeError: ``net`` is not a Block.
        MultiplierError: ``lo``/``hi`` not finite numbers > 0.
        RuleMatchError: ``n_groups`` is not between 1 and the number of layer groups.

    Examples:
        >>> rules = discriminative(net, 0.01, 1.0, n_groups=3)   # multipliers 0.01, 0.1, 1.0
    """
    even_mults(lo, hi, 1)  # check lo and hi before the network
    groups = _grouped(net, n_groups)
    mults = even_mults(lo, hi, len(groups))
    return [_rule(group, depth, mult) for depth, (group, mult) in enumerate(zip(groups, mults))]
