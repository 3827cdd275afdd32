"""``NameMapping``: MXNet parameter name -> torch ``state_dict`` key with layout transforms, as versioned JSON."""
from __future__ import annotations

import json
import os
from collections.abc import Mapping

import numpy as np

from mxformats.atomic import write_text
from migrate.errors import InputFileError, MappingError, MappingKeyError, WeightShapeError

__all__ = ["NameMapping", "FORMAT", "SCHEMA_VERSION"]

FORMAT = "gluon-lr-name-mapping"
SCHEMA_VERSION = 1


class NameMapping(Mapping):
    """MXNet parameter name -> torch ``state_dict`` key for every parameter and buffer, built from graph structure.

    Each entry also records the layout steps (``transpose``/``reshape``) that turn the MXNet array into the torch
    tensor, whether it is a conv bias folded into the next BatchNorm's running mean (exact in eval mode), and whether
    its torch tensor is held at a constant (``held``: a BatchNorm scale under MXNet's ``fix_gamma=True``, held at 1).

    Attributes:
        unmatched_mx: MXNet names with no torch counterpart.
        unmatched_torch: torch keys with no MXNet counterpart (excluding ``torch_defaults``).
        differences: readable attribute differences of matched nodes, naming both sides.
        torch_defaults: torch keys that need no MXNet source -> what they get (a zero bias where MXNet has
            none, ``num_batches_tracked`` counters).

    Examples:
        >>> m = migrate.name_mapping(gluon_net, torch_net, (1, 3, 32, 32))  # doctest: +SKIP
        >>> m["resnetv10_conv0_weight"], m.ok
        ('conv1.weight', True)
    """

    def __init__(self, entries: dict, unmatched_mx=(), unmatched_torch=(), differences=(), torch_defaults=None):
        self._entries = {k: dict(v) for k, v in entries.items()}
        self.unmatched_mx = list(unmatched_mx)
        self.unmatched_torch = list(unmatched_torch)
        self.differences = list(differences)
        self.torch_defaults = dict(torch_defaults or {})
        self.notes = []  # set by name_mapping: what was cut from the MXNet graph (Module loss heads)

    def __getitem__(self, mx_name: str) -> str:
        try:
            return self._entries[mx_name]["torch"]
        except KeyError:
            raise MappingKeyError(f"MXNet parameter {mx_name!r} is not in this mapping ({len(self)} entries); "
                                  f"check the name or mapping.unmatched_mx") from None

    def __iter__(self):
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def held(self) -> dict:
        """MXNet name -> the constant its torch tensor is held at: the scale of a BatchNorm with ``fix_gamma=True``
        (MXNet reads it as 1 and gives it no gradient), 1.0. ``to_torch`` writes the constant and ``param_groups``
        freezes the tensor, so torch computes what MXNet does whatever value MXNet stored.

        Examples:
            >>> mapping.held  # doctest: +SKIP
            {'bn1_gamma': 1.0}
        """
        return {name: float(e["held"]) for name, e in self._entries.items() if e.get("held") is not None}

    @property
    def ok(self) -> bool:
        """True when every parameter on both sides is matched and every matched pair is equivalent."""
        return not (self.unmatched_mx or self.unmatched_torch or self.differences)

    def entry(self, mx_name: str) -> dict:
        """Return a copy of the full record of ``mx_name``.

        Args:
            mx_name: an MXNet parameter name in the mapping.

        Returns:
            dict with ``torch``, ``steps`` (layout steps), ``fold``, ``kind``, ``mx_node``, ``torch_node``,
            ``mx_shape``, ``torch_shape``, and ``held`` (the constant) for a tensor held at one.

        Raises:
            MappingKeyError: ``mx_name`` is not mapped.
        """
        self[mx_name]
        return dict(self._entries[mx_name])

    def transform(self, mx_name: str) -> str | None:
        """Return a short description of the layout change MXNet -> torch for ``mx_name``, or None if none.

        Args:
            mx_name: an MXNet parameter name in the mapping.

        Returns:
            e.g. ``"reshape (8, 16, 1, 1) -> (8, 16)"``, ``"fold into 'bn.running_mean' (subtract)"``,
            ``"held at 1, frozen (MXNet fix_gamma=True)"`` or None.

        Raises:
            MappingKeyError: ``mx_name`` is not mapped.

        Examples:
            >>> mapping.transform("dense0_weight") is None  # doctest: +SKIP
            True
        """
        e = self._entries.get(mx_name) or self[mx_name]
        if e.get("fold"):
            return f"fold into {e['torch']!r} (subtract)"
        if e.get("held") is not None:
            return f"held at {e['held']:g}, frozen (MXNet fix_gamma=True)"
        parts = [f"{s} {tuple(a)}" for s, a in e["steps"]]
        return None if not parts else f"{' then '.join(parts)}: {tuple(e['mx_shape'])} -> {tuple(e['torch_shape'])}"

    def to_torch(self, mx_name: str, array: np.ndarray) -> np.ndarray:
        """Return ``array`` (the MXNet value of ``mx_name``) in the layout of its torch target.

        Args:
            mx_name: an MXNet parameter name in the mapping.
            array: its value, in MXNet's shape.

        Returns:
            A numpy array in the torch target's shape.

        Examples:
            >>> mapping.to_torch("head_weight", w).shape  # a 1x1 conv (3, 10, 1, 1) onto a Linear  # doctest: +SKIP
            (3, 10)

        Note:
            A folded conv bias returns its contribution ``-bias`` to the torch running mean; ``convert_weights``
            adds the contributions. A held tensor (``held``) returns its constant, whatever MXNet stored.

        Raises:
            MappingKeyError: ``mx_name`` is not mapped.
            WeightShapeError: ``array`` does not have the MXNet shape recorded in the mapping.
        """
        e = self._entries.get(mx_name) or self[mx_name]
        out = _check_shape(np.asarray(array), e["mx_shape"], f"MXNet parameter {mx_name!r}")
        if e.get("held") is not None:
            return np.full(tuple(e["torch_shape"]), e["held"], dtype=out.dtype)
        for step, arg in e["steps"]:
            out = np.transpose(out, arg) if step == "transpose" else out.reshape(arg)
        return -out if e.get("fold") else np.ascontiguousarray(out)

    def to_mxnet(self, torch_name: str, array: np.ndarray) -> np.ndarray:
        """Return ``array`` (the torch value of ``torch_name``) in the layout of its MXNet source (inverse).

        Args:
            torch_name: a torch ``state_dict`` key that an MXNet parameter maps to (not through a bias fold).
            array: its value, in torch's shape.

        Returns:
            A numpy array in the MXNet source's shape.

        Examples:
            >>> mapping.to_mxnet("head.weight", np.zeros((3, 10))).shape  # doctest: +SKIP
            (3, 10, 1, 1)

        Raises:
            MappingKeyError: no MXNet parameter maps to ``torch_name``.
        """
        for mx_name, e in self._entries.items():
            if e["torch"] == torch_name and not e.get("fold"):
                out = _check_shape(np.asarray(array), e["torch_shape"], f"torch tensor {torch_name!r}")
                for (step, arg), before in zip(reversed(e["steps"]), reversed(_shapes_before(e))):
                    out = np.transpose(out, np.argsort(arg)) if step == "transpose" else out.reshape(before)
                return np.ascontiguousarray(out)
        raise MappingKeyError(f"torch key {torch_name!r}: no MXNet parameter maps to it; check the name or "
                              f"mapping.unmatched_torch / mapping.torch_defaults")

    def to_dict(self) -> dict:
        """Return the mapping as the JSON-ready document that ``save`` writes."""
        return {"format": FORMAT, "schema_version": SCHEMA_VERSION, "ok": self.ok,
                "entries": [{"mxnet": k, **_jsonable(v)} for k, v in self._entries.items()],
                "unmatched_mx": self.unmatched_mx, "unmatched_torch": self.unmatched_torch,
                "differences": self.differences, "torch_defaults": self.torch_defaults}

    def save(self, path) -> None:
        """Write the mapping as versioned JSON to ``path`` atomically (temp file in the same folder + replace).

        Args:
            path: the JSON file to write (replaced if it exists).

        Examples:
            >>> mapping.save("mapping.json")  # doctest: +SKIP
        """
        write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path) -> "NameMapping":
        """Read a mapping written by ``save``.

        Raises:
            InputFileError: the file is missing or not JSON.
            MappingError: the JSON is not a name mapping of a known schema version.

        Examples:
            >>> m = NameMapping.load("mapping.json")  # doctest: +SKIP
        """
        doc = _read_json(os.fspath(path))
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise MappingError(f"mapping file {path!r}: expected a JSON object with format {FORMAT!r}, received "
                               f"{type(doc).__name__} with format {_format_of(doc)!r}; "
                               f"write it with NameMapping.save or `migrate map`")
        if doc.get("schema_version") != SCHEMA_VERSION:
            raise MappingError(f"mapping file {path!r}: schema_version {doc.get('schema_version')!r} is not supported "
                               f"(this migrate reads {SCHEMA_VERSION}); regenerate it with `migrate map`")
        try:
            entries = {e["mxnet"]: {k: _untuple(k, v) for k, v in e.items() if k != "mxnet"} for e in doc["entries"]}
            return cls(entries, doc["unmatched_mx"], doc["unmatched_torch"], doc["differences"],
                       doc["torch_defaults"])
        except (KeyError, TypeError, ValueError) as exc:
            raise MappingError(f"mapping file {path!r}: a required field is missing or malformed ({exc!r}); "
                               f"the file was edited or truncated, regenerate it with `migrate map`") from None

    def __str__(self) -> str:
        rows = [("MXNet", "torch", "transform")]
        rows += [(k, v["torch"], self.transform(k) or "") for k, v in self._entries.items()]
        rows += [(k, "(unmatched)", "") for k in self.unmatched_mx]
        rows += [("(unmatched)", k, "") for k in self.unmatched_torch]
        rows += [("(none)", k, why) for k, why in self.torch_defaults.items()]
        w0, w1 = (max(len(r[i]) for r in rows) for i in (0, 1))
        lines = [f"{a:<{w0}}  {b:<{w1}}  {c}".rstrip() for a, b, c in rows]
        lines.insert(1, "-" * min(120, w0 + w1 + 12))
        lines.append(f"{len(self)} mapped, {len(self.unmatched_mx)} unmatched MXNet, {len(self.unmatched_torch)} "
                     f"unmatched torch, {len(self.differences)} differences: {'OK' if self.ok else 'NOT EQUIVALENT'}")
        lines += [f"  difference: {d}" for d in self.differences]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"NameMapping({len(self)} entries, ok={self.ok})"


def _format_of(doc):
    return doc.get("format") if isinstance(doc, dict) else None


def _shapes_before(e: dict) -> list:
    shapes, shape = [], tuple(e["mx_shape"])
    for step, arg in e["steps"]:
        shapes.append(shape)
        shape = tuple(shape[k] for k in arg) if step == "transpose" else tuple(arg)
    return shapes


def _check_shape(array: np.ndarray, shape, what: str) -> np.ndarray:
    if tuple(array.shape) != tuple(shape):
        raise WeightShapeError(f"{what}: expected shape {tuple(shape)} (as recorded in the mapping), received "
                               f"{tuple(array.shape)}; the weights do not belong to the mapped model")
    return array


def _jsonable(v: dict) -> dict:
    return {k: ([[s, list(a)] for s, a in x] if k == "steps" else list(x) if isinstance(x, tuple) else x)
            for k, x in v.items()}


def _untuple(key: str, value):
    if key == "steps":
        return [(s, tuple(a)) for s, a in value]
    return tuple(value) if key in ("mx_shape", "torch_shape") else value


def _read_json(path: str):
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO or device could block the read forever
        raise InputFileError(f"mapping file {path!r}: not a regular file; give the file `migrate map --out` wrote")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise InputFileError(f"mapping file {path!r}: not found; give the path `migrate map --out` wrote") from None
    except RecursionError:
        raise InputFileError(f"mapping file {path!r}: JSON nested too deeply to be a mapping; regenerate it with "
                             f"`migrate map`") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputFileError(f"mapping file {path!r}: expected JSON written by NameMapping.save, could not parse "
                             f"it ({exc}); regenerate it with `migrate map`") from None

