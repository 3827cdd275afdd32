"""Rules that select parameters, and the resolution of every parameter's lr_mult and wd_mult into one table.

Data flows one way: ``collect_params`` (what the parameters are and which layer kind each belongs to) ->
``match_rules`` (which parameters each rule selects) -> ``resolve`` (one ``Entry`` per parameter name).
"""
import dataclasses
import difflib
import fnmatch
import re
from typing import Iterable, Mapping, Optional, Sequence

from mxnet import gluon
from mxnet.gluon import nn
from mxnet.gluon.nn import basic_layers, conv_layers

from mxformats.validate import check_multiplier

from .errors import DuplicateParameterError, MultiplierError, ParamsTypeError, PatternError, RuleMatchError

__all__ = ["Rule", "KINDS", "Entry", "collect_params", "match_rules", "resolve"]

#: Reserved selectors that select by layer kind instead of by name.
KINDS = ("bias", "norm", "embedding", "depthwise")
#: Kinds that name conventions cannot tell; they need the Block.
_BLOCK_ONLY_KINDS = ("embedding", "depthwise")
NORM_SUFFIXES = ("gamma", "beta", "running_mean", "running_var", "moving_mean", "moving_var")
NORM_BLOCKS = (basic_layers._BatchNorm, nn.InstanceNorm, nn.LayerNorm, nn.GroupNorm)


@dataclasses.dataclass(frozen=True)
class Rule:
    """Gives the parameters that ``select`` picks an lr_mult and/or a wd_mult.

    ``select`` is one of: a layer kind (the reserved words ``'bias'``, ``'norm'``, ``'embedding'``,
    ``'depthwise'``); a regex with an ``re:`` prefix, matched against the WHOLE parameter name (``re.fullmatch``);
    otherwise a glob (``fnmatch``, case-sensitive) matched against the whole name. Never a bare substring.

    Args:
        select: The selector described above.
        lr_mult: Learning-rate multiplier for the selected parameters, or None to leave it.
        wd_mult: Weight-decay multiplier for the selected parameters, or None to leave it.
        freeze: True freezes the selected parameters when the trainer is built (``LrTrainer.freeze``), False
            leaves them trainable against an earlier freezing rule, None leaves it.

    Raises:
        PatternError: ``select`` is empty, not a string, or an invalid regex.
        ParamsTypeError: ``freeze`` is not True, False or None.
        MultiplierError: a multiplier is negative, NaN, infinite or not a number, or the rule sets nothing.

    Examples:
        >>> Rule("resnetv10_dense0_*", lr_mult=10.0)
        >>> Rule("norm", wd_mult=0.0)
        >>> Rule(r"re:.*stage[12]_.*", lr_mult=0.1)
        >>> Rule("resnetv10_stage1_*", freeze=True)
    """

    select: str
    lr_mult: Optional[float] = None
    wd_mult: Optional[float] = None
    freeze: Optional[bool] = None

    def __post_init__(self):
        """Validate the selector and normalise the multipliers to floats."""
        if not isinstance(self.select, str) or not self.select.strip():
            raise PatternError(f"Rule.select must be a non-empty string (a glob, 're:<regex>' or one of {KINDS}), "
                               f"got {self.select!r}; pass e.g. Rule('*_bias', wd_mult=0.0).")
        if self.select.startswith("re:"):
            try:
                re.compile(self.select[3:])
            except (re.error, OverflowError, RecursionError) as exc:  # a{99999999999} overflows, deep nesting recurses
                raise PatternError(f"Rule.select {self.select!r:.80} is not a valid regex ({type(exc).__name__}: "
                                   f"{str(exc):.80}); fix the pattern after 're:' or use a glob without the "
                                   f"prefix.") from None
        for field in ("lr_mult", "wd_mult"):
            value = getattr(self, field)
            if value is not None:
                object.__setattr__(self, field, check_multiplier(value, f"Rule({self.select!r}).{field}"))
        if self.freeze is not None and not isinstance(self.freeze, bool):
            raise ParamsTypeError(f"Rule({self.select!r}).freeze must be True, False or None, got {self.freeze!r}; "
                                  f"pass freeze=True to freeze the selected parameters.")
        if not self._sets_something():
            raise MultiplierError(f"Rule({self.select!r}) sets nothing: expected lr_mult and/or wd_mult, got both "
                                  f"None; give at least one, e.g. Rule({self.select!r}, lr_mult=0.1).")

    def _sets_something(self) -> bool:
        """Whether the rule changes anything (extend when fields are added)."""
        return self.lr_mult is not None or self.wd_mult is not None or self.freeze is not None

    @property
    def kind(self) -> Optional[str]:
        """The layer kind this rule selects, or None when it selects by name."""
        return self.select if self.select in KINDS else None

    def label(self, index: int) -> str:
        """How explain() names this rule: its position in ``rules`` and its selector."""
        return f"rules[{index}] {self.select!r}"

    def selects(self, name: str, kinds: frozenset) -> bool:
        """Whether this rule selects a parameter with this name and these layer kinds."""
        if self.kind is not None:
            return self.kind in kinds
        if self.select.startswith("re:"):
            return re.fullmatch(self.select[3:], name) is not None
        return fnmatch.fnmatchcase(name, self.select)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One parameter's resolved multipliers, where each came from, and the rules they shadowed."""

    lr_mult: float
    lr_source: str
    wd_mult: float
    wd_source: str
    shadowed: tuple = ()


@dataclasses.dataclass(frozen=True)
class ParamKinds:
    """The layer kinds of one parameter, and whether they were read from its Block (else from its name)."""

    kinds: frozenset
    from_block: bool


def _name_kinds(name: str) -> frozenset:
    """Kinds guessed from MXNet's naming conventions (used when no Block is given)."""
    kinds = set()
    if name.endswith("bias"):
        kinds.add("bias")
    if any(name.endswith(suffix) for suffix in NORM_SUFFIXES):
        kinds.add("norm")
    return frozenset(kinds)


def _block_kinds(block: gluon.Block, attr: str) -> frozenset:
    """Kinds of the parameter registered as ``block.<attr>``."""
    kinds = set()
    if attr == "bias" or attr.endswith("_bias"):
        kinds.add("bias")
    if isinstance(block, NORM_BLOCKS):
        kinds.add("norm")
    if isinstance(block, nn.Embedding):
        kinds.add("embedding")
    if isinstance(block, conv_layers._Conv):
        groups = block._kwargs.get("num_group", 1)
        if groups > 1 and groups == block._channels:
            kinds.add("depthwise")
    return frozenset(kinds)


def _walk_block(block: gluon.Block, found: dict) -> None:
    """Record the kinds of every parameter registered on ``block`` and its children (first registration wins)."""
    for attr, param in block._reg_params.items():
        found.setdefault(id(param), _block_kinds(block, attr))
    for child in block._children.values():
        _walk_block(child, found)


def _items_of(obj, where: str) -> list:
    """(Parameter, kinds or None) pairs of one element of ``params``; sorted by name for dicts and Blocks."""
    if isinstance(obj, gluon.Parameter):
        return [(obj, None)]
    if isinstance(obj, gluon.Block):
        found = {}
        _walk_block(obj, found)
        params = obj.collect_params()
        return [(params[k], found.get(id(params[k]))) for k in sorted(params.keys())]
    if isinstance(obj, (gluon.ParameterDict, dict)):
        bad = [k for k, v in obj.items() if not isinstance(v, gluon.Parameter)]
        if bad:
            raise ParamsTypeError(f"{where} maps {bad[:3]} to non-Parameters ({type(obj[bad[0]]).__name__}); "
                                  f"expected name -> mxnet.gluon.Parameter, e.g. net.collect_params().")
        return [(obj[k], None) for k in sorted(obj.keys())]
    raise ParamsTypeError(f"{where} must be a Block, ParameterDict, Parameter or a list of them, got "
                          f"{type(obj).__name__}; pass e.g. net (a Block) or net.collect_params().")


def collect_params(params) -> tuple:
    """Merge ``params`` into one list of Parameters and the layer kinds of each.

    Args:
        params: A Block, ParameterDict, dict name -> Parameter, or a list/tuple of those and/or Parameters.
            Dicts and Blocks contribute their parameters sorted by name (as ``gluon.Trainer`` does); a list keeps
            its order. The same Parameter reached twice is kept once.

    Returns:
        ``(parameters, kinds)``: the list of Parameters and a dict name -> ``ParamKinds``.

    Raises:
        ParamsTypeError: ``params`` or one of its elements is of another type, or it holds no parameter.
        DuplicateParameterError: two different Parameter objects have the same name (both are named).

    Examples:
        >>> params, kinds = collect_params([backbone, head.collect_params()])
    """
    elements = list(params) if isinstance(params, (list, tuple)) else [params]
    pairs = []
    for i, element in enumerate(elements):
        pairs += _items_of(element, "params" if element is params else f"params[{i}]")
    merged, kinds, clashes = {}, {}, []
    for param, block_kinds in pairs:
        seen = merged.get(param.name)
        if seen is not None and seen is not param:
            clashes.append((seen, param))
            continue
        if seen is None or (block_kinds is not None and not kinds[param.name].from_block):
            kinds[param.name] = ParamKinds(block_kinds if block_kinds is not None else _name_kinds(param.name),
                                           block_kinds is not None)
        merged[param.name] = param
    if clashes:
        seen, param = clashes[0]
        raise DuplicateParameterError(
            f"{len(clashes)} name(s) belong to two different Parameters: {[p.name for p, _ in clashes[:8]]}; e.g. "
            f"{seen!r} (id {id(seen)}) and {param!r} (id {id(param)}). Give the Blocks distinct prefixes "
            f"or pass each Parameter once.")
    if not merged:
        raise ParamsTypeError(f"params holds no Parameter (got {type(params).__name__} of length {len(elements)}); "
                              f"pass a Block or ParameterDict with parameters.")
    return list(merged.values()), kinds


def nearest_names(select: str, names: Sequence[str]) -> list:
    """The names closest to a selector, for error messages."""
    key = select[3:] if select.startswith("re:") else select
    close = difflib.get_close_matches(key, names, n=5, cutoff=0.0)
    return close or list(names[:5])


def _check_kind_known(rule: Rule, kinds: Mapping[str, ParamKinds]) -> None:
    """A kind that only Blocks can tell needs every parameter to come from a Block."""
    unknown = [name for name, k in kinds.items() if not k.from_block]
    if rule.kind in _BLOCK_ONLY_KINDS and unknown:
        raise RuleMatchError(f"Rule({rule.select!r}) selects by layer kind, which a Parameter does not know: "
                             f"{len(unknown)} parameters (e.g. {unknown[:3]}) were not given with their Block; "
                             f"pass the Block (e.g. params=net) instead of net.collect_params().")


def match_rules(rules: Iterable[Rule], kinds: Mapping[str, ParamKinds]) -> list:
    """For each rule, the tuple of parameter names it selects (in ``kinds`` order).

    Args:
        rules: The rules, in order.
        kinds: name -> ParamKinds from ``collect_params``.

    Returns:
        A list with one tuple of names per rule.

    Raises:
        RuleMatchError: a rule selects nothing (the error lists the nearest names), or selects by a kind that
            needs Blocks that were not given.
        ParamsTypeError: an element of ``rules`` is not a Rule.

    Examples:
        >>> match_rules([Rule("*_bias", wd_mult=0.0)], kinds)
    """
    names = list(kinds)
    matched = []
    for i, rule in enumerate(rules):
        if not isinstance(rule, Rule):
            raise ParamsTypeError(f"rules[{i}] must be a gluon_lr.Rule, got {type(rule).__name__} ({rule!r}); "
                                  f"write e.g. Rule('*_bias', wd_mult=0.0).")
        _check_kind_known(rule, kinds)
        hits = tuple(n for n in names if rule.selects(n, kinds[n].kinds))
        if not hits:
            hint = (f"the kinds present are {sorted(set().union(*(k.kinds for k in kinds.values())))}"
                    if rule.kind else f"the nearest names are {nearest_names(rule.select, names)}")
            raise RuleMatchError(f"{rule.label(i)} selects no parameter among {len(names)}; {hint}. "
                                 f"Fix the selector (globs match the whole name; regexes need 're:') or drop it.")
        matched.append(hits)
    return matched


def _resolve_one(name, base, rules, matched, explicit) -> Entry:
    """Resolve one parameter: Parameter attribute < rules in order < explicit set_*_mult calls."""
    values = {"lr_mult": [(base[0], "param")], "wd_mult": [(base[1], "param")]}
    for i, (rule, hits) in enumerate(zip(rules, matched)):
        if name in hits:
            for field in values:
                if getattr(rule, field) is not None:
                    values[field].append((getattr(rule, field), rule.label(i)))
    for field, table in explicit.items():
        if name in table:
            values[field].append(table[name])
    shadowed = tuple(f"{source} ({field}={value:g})" for field, chain in values.items()
                     for value, source in chain[1:-1])
    (lr, lr_src), (wd, wd_src) = values["lr_mult"][-1], values["wd_mult"][-1]
    return Entry(lr, lr_src, wd, wd_src, shadowed)


def resolve(names: Sequence[str], base: Mapping[str, tuple], rules: Sequence[Rule], matched: Sequence[tuple],
            explicit: Mapping[str, tuple]) -> dict:
    """Resolve every parameter's multipliers into one table.

    Precedence, lowest first: the Parameter's own ``lr_mult``/``wd_mult``; the rules in order (a later rule
    overrides an earlier one); explicit values (``explicit``, e.g. from ``set_lr_mult``).

    Args:
        names: Parameter names, in the optimizer's index order.
        base: name -> (lr_mult, wd_mult) read from the Parameters.
        rules: The rules, in order.
        matched: For each rule, the names it selects (from ``match_rules``).
        explicit: ``{"lr_mult": {name: (value, source)}, "wd_mult": {name: (value, source)}}``, e.g. the values
            given to ``set_lr_mult`` with source ``"set_lr_mult"``.

    Returns:
        A dict name -> Entry, in ``names`` order.

    Examples:
        >>> explicit = {"lr_mult": {"dense0_weight": (10.0, "set_lr_mult")}, "wd_mult": {}}
        >>> table = resolve(names, base, rules, match_rules(rules, kinds), explicit)
    """
    matched = [frozenset(hits) for hits in matched]
    return {name: _resolve_one(name, base[name], rules, matched, explicit) for name in names}
