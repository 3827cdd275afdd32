"""Fixtures for the migrate tests: seeded Gluon/torch model pairs and their mappings (built once per session,
``tests/migrate/pairs.py``). Where MXNet is not installed (a GPU machine running the torch-side tests of this folder,
``tests/migrate/optim/test_gpu.py``), the pairs are not offered."""
import importlib.util

import pytest

if importlib.util.find_spec("mxnet") is not None:
    from tests.migrate.pairs import EQUIVALENT, build_pair
else:  # pragma: no cover (CI has MXNet)
    EQUIVALENT, build_pair = [], None


@pytest.fixture(params=EQUIVALENT)
def equivalent_pair(request):
    """Each equivalent pair with its mapping."""
    return (request.param, *build_pair(request.param))


@pytest.fixture
def pair():
    """The ``build_pair`` function."""
    return build_pair
