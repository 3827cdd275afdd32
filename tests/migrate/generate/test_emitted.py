"""Tests of migrate.generate.emitted and the op modules' emitted objects: each helper and layer class an op module
lists in its ``__all__`` uses only torch, ``nn``, ``F``, ``math`` and other emitted objects (so a file holding its
closure stands alone), names are unique across the op modules, and the closure lists what an object uses first."""
import math
import types

import pytest
import torch

from migrate.generate.emitted import closure, emittable, free_globals, imports_of, source_of
from migrate.generate.ops import FAMILIES
from migrate.generate.ops.detection import mx_box_nms
from migrate.generate.ops.indexing import mx_sorted_indices

_ALLOWED_MODULES = {torch, torch.nn, torch.nn.functional, math}


def _all_emitted() -> list:
    return [getattr(module, name) for module in FAMILIES for name in module.__all__]


class TestEmittable:
    def test_every_listed_object_is_emittable(self):
        """Each name in an op module's __all__ is a function or class that module defines."""
        objects = _all_emitted()
        assert len(objects) > 50
        assert all(emittable(obj) for obj in objects), [o for o in objects if not emittable(o)]

    def test_translators_are_not(self):
        """A translator (registered, private) is not copied into files."""
        from migrate.generate.registry import translator
        assert not emittable(translator("Convolution", "c"))

    def test_names_are_unique_across_the_op_modules(self):
        """A generated file holds one object per name: no two op modules emit the same name."""
        names = [obj.__name__ for obj in _all_emitted()]
        assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})


class TestFreeGlobals:
    @pytest.mark.parametrize("obj", _all_emitted(), ids=lambda o: o.__name__)
    def test_uses_only_torch_and_emitted_objects(self, obj):
        """What an emitted object's code reads from its module is torch, nn, F, math, a torch class, or emitted."""
        bad = {name: value for name, value in free_globals(obj).items()
               if not (emittable(value) or value in _ALLOWED_MODULES
                       or getattr(value, "__module__", "").startswith("torch"))}
        assert not bad, f"{obj.__name__} reads {sorted(bad)} from its module: a generated file would not have them"


class TestClosure:
    def test_dependencies_first(self):
        """mx_box_nms's closure holds the indexing helper it calls (another module), before mx_box_nms."""
        names = [obj.__name__ for obj in closure({mx_box_nms})]
        assert names[-1] == "mx_box_nms" and "mx_sorted_indices" in names and "mx_greedy_keep" in names

    def test_same_name_twice_is_an_error(self):
        """Two different objects with one name cannot share a file: RuntimeError naming both modules."""
        clash = types.FunctionType(mx_sorted_indices.__code__, {}, "mx_sorted_indices")
        clash.__module__ = "elsewhere"
        with pytest.raises(RuntimeError, match=r"two emitted objects are named 'mx_sorted_indices' \("):
            closure({mx_box_nms, clash})

    def test_all_emitted_sources_run_alone(self):
        """The closure of every emitted object, with its imports, runs in a namespace holding only torch, nn, F
        and math, and defines each object."""
        objects = closure(set(_all_emitted()))
        code = "\n".join(["import math", "import torch", "import torch.nn.functional as F", "from torch import nn",
                          *imports_of(objects), source_of(objects)])
        namespace = {}
        exec(compile(code, "<emitted>", "exec"), namespace)
        assert {obj.__name__ for obj in objects} <= set(namespace)
