"""Readable names for the generated module: ``state_dict`` keys that mirror the Gluon block tree, module paths.

From a HybridBlock the keys follow its attribute tree (``features.3.body.0.weight``: ``features`` is an attribute,
``3`` a child of a ``HybridSequential``). From symbol/params files the tree is rebuilt from MXNet's name prefixes:
``resnetv10_stage1_conv0_weight`` -> ``stage1.conv0.weight`` (the prefix every name shares is dropped).
"""
from __future__ import annotations

import collections
import keyword
import os
import re

import torch

__all__ = ["param_keys", "block_paths", "block_classes", "tree_order", "identifier"]

_SUFFIXES = ("running_mean", "running_var", "moving_mean", "moving_var", "moving_inv_var")
_RESERVED = set(dir(torch.nn.Module)) | {"self", "torch", "F", "math"}


def identifier(text: str, numeric_ok: bool = False) -> str:
    """``text`` made a valid, non-reserved Python identifier (digits kept as they are if ``numeric_ok``)."""
    if numeric_ok and text.isdigit():
        return text
    name = re.sub(r"\W", "_", text) or "_"
    if name[0].isdigit():
        name = "_" + name
    if keyword.iskeyword(name) or name in _RESERVED:
        name += "_"
    return name


def param_keys(block, names: list) -> dict:
    """MXNet parameter name -> torch ``state_dict`` key for each of ``names``.

    Args:
        block: the Gluon block read (keys from its attribute tree), or None (symbol/params files).
        names: the MXNet parameter and auxiliary-state names the graph uses.

    Returns:
        A dict; the keys are unique and no key is both a leaf and a module path.
    """
    tree = _block_keys(block) if block is not None else {}
    prefix = _common_prefix([n for n in names if n not in tree])
    keys = {}
    for name in names:
        keys[name] = tree.get(name) or _prefix_key(name[len(prefix):])
    if not _consistent(keys.values()):
        keys = {name: identifier(name) for name in names}
    return keys


def block_paths(block, node_names: list, param_names: list) -> dict:
    """Op node name -> the module path of the block that made it alone (where a layer without parameters goes).

    From a HybridBlock: the path of a child block that has no parameters and no children and made one node (called
    once or more): ``features.2`` for ResNet's ``Activation``. From files: the node's name read as keys are
    (``resnetv10_stage1_relu0_fwd`` -> ``stage1.relu0``; the prefix the parameter names share and ``_fwd`` dropped).

    Args:
        block: the Gluon block read, or None (symbol/params files).
        node_names: the graph's op node names.
        param_names: the MXNet parameter and auxiliary-state names the graph uses.

    Returns:
        A dict holding the nodes that have such a path.
    """
    if block is None:
        prefix = _common_prefix(param_names)
        out = {}
        for name in node_names:
            stem = re.sub(r"_(fwd|output)$", "", name[len(prefix):] if name.startswith(prefix) else name)
            segments = [identifier(s, numeric_ok=True) for s in stem.split("_") if s]
            if segments:
                out[name] = ".".join(segments)
        return out
    leaves = _leaf_blocks(block)
    owner = {}
    for name in dict.fromkeys(node_names):
        cuts = [i + 1 for i, c in enumerate(name) if c == "_" and name[:i + 1] in leaves]
        if cuts:
            owner.setdefault(name[:max(cuts)], []).append(name)
    return {names[0]: leaves[prefix] for prefix, names in owner.items() if len(names) == 1}


def _leaf_blocks(block) -> dict:
    """Gluon prefix -> module path of each block without parameters and children (a prefix several blocks share,
    Gluon's empty prefix included, is left out)."""
    found, todo = [], [(block, "")]
    while todo:
        parent, path = todo.pop()
        for attr, child in parent._children.items():
            child_path = path + identifier(attr, numeric_ok=True)
            if child._reg_params or child._children:
                todo.append((child, child_path + "."))
            else:
                found.append((child.prefix, child_path))
    count = collections.Counter(prefix for prefix, _ in found)
    return {prefix: path for prefix, path in found if prefix and count[prefix] == 1}


def tree_order(block) -> list:
    """The module paths and parameter keys of a HybridBlock in Gluon's registration order (a block's parameters,
    then its children, depth first): the generated tree lists children so. Empty without a block (files: graph
    order then)."""
    if block is None:
        return []
    out = [identifier(attr) for attr in block._reg_params]
    for path, child in _blocks(block):
        out += [path] + [f"{path}.{identifier(attr)}" for attr in child._reg_params]
    return out


def block_classes(block) -> dict:
    """Module path -> class name of each block under a Gluon block (``features.norm4`` -> ``Normalize``); empty
    without a block (files name no classes)."""
    return {path: type(child).__name__ for path, child in _blocks(block)} if block is not None else {}


def _blocks(block, prefix: str = ""):
    """(module path, block) of each block under ``block``, depth first in registration order."""
    for attr, child in block._children.items():
        path = prefix + identifier(attr, numeric_ok=True)
        yield path, child
        yield from _blocks(child, path + ".")


def _block_keys(block, prefix: str = "") -> dict:
    out = {}
    for attr, param in block._reg_params.items():
        out.setdefault(param.name, prefix + identifier(attr))
    for attr, child in block._children.items():
        for name, key in _block_keys(child, prefix + identifier(attr, numeric_ok=True) + ".").items():
            out.setdefault(name, key)
    return out


def _common_prefix(names: list) -> str:
    """The longest prefix ending in '_' that every name shares (empty for fewer than two names)."""
    if len(names) < 2:
        return ""
    common = os.path.commonprefix(names)
    return common[:common.rfind("_") + 1]


def _prefix_key(name: str) -> str:
    leaf = next((s for s in _SUFFIXES if name.endswith("_" + s)), None) or name.rsplit("_", 1)[-1]
    path = name[:-len(leaf)].rstrip("_")
    segments = [identifier(s, numeric_ok=True) for s in path.split("_") if s] + [identifier(leaf)]
    return ".".join(segments)


def _consistent(keys) -> bool:
    keys = list(keys)
    if len(set(keys)) != len(keys):
        return False
    modules = {k.rsplit(".", 1)[0] for k in keys if "." in k}
    prefixes = {".".join(k.split(".")[:i]) for k in modules for i in range(1, k.count(".") + 2)}
    return not any(k in prefixes for k in keys)
