"""torch DistributedDataParallel with per-group learning rates, two CPU processes (gloo) on 127.0.0.1.

Groundwork for issue 7 point 3 (the migrated param groups under DDP): the harness and the equality with one process.
"""
import os
import signal

import numpy as np
import pytest

from tests.gluon_lr.dist_harness import run_torch_ddp
from tests.migrate import ddp_worker as W

pytestmark = pytest.mark.slow

#: float64 throughout; DDP averages the two ranks' gradients, one process takes the mean over both batches.
ATOL = 1e-12


@pytest.fixture
def started():
    """Every process the test starts; killed (and the test failed) if one is still running at teardown."""
    procs = []
    try:
        yield procs
    finally:
        alive = [p for p in procs if p.poll() is None]
        for proc in alive:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert not alive, f"{len(alive)} process(es) were left running"


class TestDDPParamGroups:
    """Param groups with their own lr and weight decay train under DDP as in one process."""

    def test_two_ranks_equal_one_process(self, tmp_path, started):
        """After 5 SGD steps both ranks hold the one-process weights (float64, ATOL), and the groups mattered."""
        run_torch_ddp(["-m", "tests.migrate.ddp_worker", str(tmp_path)], tmp_path / "logs", timeout=90,
                      started=started)
        import torch

        def both(step):
            parts = [W.batch(step, rank) for rank in (0, 1)]
            return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])

        model = W.build_model()
        want = W.train(model, W.make_optimizer(model), both, 2 * W.BATCH)
        model = W.build_model()
        plain = W.train(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01),
                        both, 2 * W.BATCH)
        for rank in (0, 1):
            got = np.load(tmp_path / f"rank{rank}.npz")
            diff, name = max((float(np.abs(got[f"module.{k}"] - v).max()), k) for k, v in want.items())
            assert diff <= ATOL, f"rank {rank}: {name} differs from one process by {diff}"
        assert max(float(np.abs(plain[k] - want[k]).max()) for k in want) > 1e-3, "the groups must matter"
