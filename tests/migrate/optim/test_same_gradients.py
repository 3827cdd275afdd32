"""Every exact optimizer against MXNet 1.9.1 given the same gradients (``same_gradients.run``: 88k elements cut for 2
threads, lr_mult/wd_mult groups, wd, clipping, ``rescale_grad``, a schedule): the optimizers alone, without the
rounding of two frameworks' forward and backward passes that ``test_trajectories.py`` also measures.

Pinned by ``bench/bench_optim_exactness.py``'s audit: on CPU every exact optimizer equals MXNet's update bit for bit
in float32 and float64, but LARS, LBSGD and GroupAdaGrad, whose updates torch's operations replay in another order
(within the float rounding of MXNet's: 1e-5 in float32, 1e-12 in float64, the bounds of the trajectory tests).
"""
import numpy as np
import pytest

from tests.migrate.optim import same_gradients as S

STEPS = 5
#: Replayed by torch's operations (fused multiply-adds, other orders), not bit for bit
NOT_BIT_EXACT = {"lars", "lbsgd", "groupadagrad"}
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", list(S.CASES))
def test_equals_mxnet_given_the_same_gradients(case, dtype):
    """5 steps: the torch weights equal MXNet's bit for bit (LARS, LBSGD, GroupAdaGrad: within TOLERANCE), and they
    moved."""
    expected, weights = S.run(case, dtype, STEPS)
    worst = max(float(np.abs(e - w).max()) for e, w in zip(expected, weights))
    moved = max(float(np.abs(e - s).max()) for e, s in zip(expected, S.start(dtype)))
    assert moved > 1e-3, f"{case} {dtype}: MXNet's weights moved only {moved:.3g}"
    bound = TOLERANCE[dtype] if case in NOT_BIT_EXACT else 0.0
    assert worst <= bound, f"{case} {dtype}: {worst:.3g} from MXNet's weights (bound {bound})"
