"""Migrated param groups under torch DistributedDataParallel: two gloo ranks on CPU (127.0.0.1), issue 7 point 3.

A float64 Gluon net is trained 3 steps by LrTrainer (lr_mult/wd_mult rules, a frozen layer, an lr scheduler; SGD
with momentum, and Adam), exported (settings, states, weights), migrated with migrate's public functions, and
trained 4 more steps three ways: under DDP (each rank half of each batch), in one torch process (whole batch) and
on in MXNet. See ``tests/migrate/ddp_worker.py``.
"""
import os
import re
import signal
import time

import numpy as np
import pytest

from devtools.local_cluster import ClusterError, run_torch_ddp
from tests.migrate import ddp_worker as W

pytestmark = pytest.mark.slow

#: float64 throughout. MXNet's SGD/Adam kernels and migrate's exact optimizers agree to ~1e-16; DDP averages two
#: half-batch gradient sums where one process sums the whole batch, which changes only the rounding.
ATOL = 1e-12
#: Hard deadline of a DDP job (the harness kills every rank past it); generous for a loaded 2-core machine.
TIMEOUT = 120.0


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """case -> (folder with the MXNet files, MXNet reference weights), for every case of ``W.CASES``."""
    out = {}
    for case in W.CASES:
        folder = tmp_path_factory.mktemp("mx") / case
        folder.mkdir()
        out[case] = (folder, W.mx_phase(case, folder))
    return out


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


def _worst(got: dict, want: dict, keys) -> tuple:
    """(largest absolute difference, its key) between two dicts of arrays over ``keys``."""
    return max((float(np.abs(np.asarray(got[k]) - np.asarray(want[k])).max()), k) for k in keys)


@pytest.fixture(scope="module")
def ddp_run(cases, tmp_path_factory):
    """Run the DDP job once for all cases; returns the output folder with ``{case}-rank{r}.npz``."""
    out, started = tmp_path_factory.mktemp("ddp"), []
    run_torch_ddp(["-m", "tests.migrate.ddp_worker", str(out), "0"] + [str(cases[c][0]) for c in W.CASES],
                  out / "logs", timeout=TIMEOUT, started=started)
    assert len(started) == 2 and all(p.poll() is not None for p in started), "a DDP rank was left running"
    return out


class TestDDPMigratedGroups:
    """The migrated model, param groups, optimizer state and lr schedule train under DDP as in one process."""

    def test_mapping_and_groups_follow_the_rules(self, cases):
        """name_mapping finds the true names; each torch parameter's group has the rules' lr and wd, by id."""
        for case, (folder, ref) in cases.items():
            assert dict(ref["mapping"]) == W.TRUTH, f"{case}: mapping {dict(ref['mapping'])}"
            model, optimizer, _ = W.migrated(folder)
            rate, wd = W.mx_rate(case, W.MX_STEPS + 1), W.CASES[case][1]["wd"]
            group_of = {id(p): g for g in optimizer.param_groups for p in g["params"]}
            for key, param in model.named_parameters():
                expected = W.expected_multipliers()[key]
                if expected is None:
                    group = group_of[id(param)]
                    assert group["frozen"] and group["lr"] == 0 and not param.requires_grad, f"{case}: {key} not frozen"
                    continue
                group = group_of[id(param)]
                got, want = (group["lr"], group["weight_decay"]), (rate * expected[0], wd * expected[1])
                assert got == pytest.approx(want, rel=1e-12, abs=0), f"{case}: {key} (lr, wd) {got}, expected {want}"

    @pytest.mark.parametrize("control", ["no multipliers", "no optimizer state"])
    def test_controls_end_far_from_mxnet(self, cases, control):
        """Without the multipliers (every group at the base lr and wd), or without the converted optimizer state, the
        weights end far from MXNet's: the comparisons below can fail."""
        for case, (folder, ref) in cases.items():
            model, optimizer, scheduler = W.migrated(folder, convert_state=control != "no optimizer state")
            for group in optimizer.param_groups if control == "no multipliers" else ():
                group["lr"] /= group["lr_mult"]
                group["lr_mult"], group["weight_decay"] = 1.0, W.CASES[case][1]["wd"]
            got = W.torch_train(model, optimizer, scheduler)
            diff, key = _worst(got, {k: ref["final"][m] for m, k in W.TRUTH.items()}, got)
            assert diff > 1e-3, f"{case}, {control}: the weights still end at MXNet's (largest diff {diff} at {key})"

    @pytest.mark.parametrize("case", list(W.CASES))
    def test_two_ranks_equal_one_process_and_mxnet(self, case, cases, ddp_run):
        """Both DDP ranks end equal to each other, to one process and to MXNet (ATOL); the frozen layer is unmoved."""
        folder, ref = cases[case]
        model, optimizer, scheduler = W.migrated(folder)
        one = W.torch_train(model, optimizer, scheduler)
        final = {key: ref["final"][mx] for mx, key in W.TRUTH.items()}
        start = {key: ref["migrated"][mx] for mx, key in W.TRUTH.items()}
        ranks = [dict(np.load(ddp_run / f"{case}-rank{r}.npz")) for r in (0, 1)]
        assert set(ranks[0]) == set(W.TRUTH.values()), f"rank 0 saved {sorted(ranks[0])}"
        for rank, got in enumerate(ranks):
            diff, key = _worst(got, one, got)
            assert diff <= ATOL, f"{case} rank {rank}: {key} differs from the one-process run by {diff}"
            diff, key = _worst(got, final, got)
            assert diff <= ATOL, f"{case} rank {rank}: {key} differs from MXNet continued by {diff}"
            for key in ("hidden.weight", "hidden.bias"):
                assert np.array_equal(got[key], start[key]), f"{case} rank {rank}: frozen {key} moved"
        diff, key = _worst(ranks[0], ranks[1], ranks[0])
        assert diff == 0.0, f"{case}: the ranks disagree at {key} by {diff}"
        diff, key = _worst(ranks[0], start, [k for k in start if not k.startswith("hidden.")])
        assert diff > 1e-3, f"{case}: the trained layers barely moved (largest change {diff} at {key})"


class TestDDPFailure:
    """A rank that dies mid-training fails the job at once, with its name, and leaves no process behind."""

    def test_dead_rank_fails_fast(self, cases, tmp_path, started):
        """Rank 1 exits before a backward pass (rank 0 waits in the all-reduce): ClusterError at once, not at the
        deadline, with both ranks' exit codes and output."""
        begin = time.monotonic()
        with pytest.raises(ClusterError, match=r"rank1 \(exit code 3\)") as info:
            run_torch_ddp(["-m", "tests.migrate.ddp_worker", str(tmp_path), str(W.MX_STEPS + 2),
                           str(cases["sgd"][0])], tmp_path / "logs", timeout=TIMEOUT, started=started)
        elapsed, message = time.monotonic() - begin, str(info.value)
        assert re.match(r"role 'rank[01]' died with exit code [13] before", message), \
            f"not a death report after {elapsed:.1f} s (deadline {TIMEOUT} s): {message[:300]}"
        assert "rank0 (exit code" in message, f"the error shows no tail of rank 0: {message}"
        assert not list(tmp_path.glob("*.npz")), "a rank finished although its peer died"
