"""Shared test configuration: every test starts from the same seeds."""
import random

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _seed_everything():
    """Seed python, numpy and (when imported) mxnet and torch before every test."""
    random.seed(0)
    np.random.seed(0)
    import sys
    if "mxnet" in sys.modules:
        sys.modules["mxnet"].random.seed(0)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(0)
    yield
