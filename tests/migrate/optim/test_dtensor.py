"""The exact optimizers on DTensor parameters (FSDP2's ``fully_shard`` on 2 gloo CPU ranks) and with
``torch.distributed.checkpoint.state_dict``'s ``get_state_dict``/``set_state_dict``. See ``dtensor_worker.py``."""
import json

import numpy as np
import pytest
import torch
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from devtools.local_cluster import run_torch_ddp
from tests.migrate.optim import dtensor_worker as W

#: Cases whose update takes whole-tensor norms: each rank sums its shard into a float (MXNet's multi_sum_sq), the
#: ranks' sums are added in float64, where one process sums the whole tensor into one float. The float sums differ
#: by at most (elements - 1) * 2**-24 relative (24 elements here), so over STEPS steps the trust ratios, and the
#: weights' movement, by at most STEPS * 2 * 24 * 2**-24 ~ 1.1e-5 of that movement. Every other case is elementwise
#: on each shard: bit-equal to one process.
NORM_CASES = {"lamb", "lars"}


@pytest.fixture(scope="module")
def sharded_runs(tmp_path_factory):
    """(report, out folder) of the worker on 2 ranks, every case."""
    out = tmp_path_factory.mktemp("dtensor")
    run_torch_ddp(["-m", "tests.migrate.optim.dtensor_worker", str(out)], out, world_size=2, timeout=180)
    return json.loads((out / "report.json").read_text()), out


@pytest.mark.slow
class TestShardedParameters:
    """Exact optimizers stepping FSDP2's DTensor parameters (Shard(0), rank 1 holding empty shards of the last
    layer)."""

    @pytest.mark.parametrize("case", list(W.CASES))
    def test_equals_one_process(self, sharded_runs, case):
        """After 4 steps the gathered weights equal one process's: bit for bit, or within 1.1e-5 of the weights'
        movement where the update takes whole-tensor norms (NORM_CASES)."""
        _, out = sharded_runs
        expected, got = W.single_process(case), np.load(out / f"{case}.npz")
        start = {name: p.detach().numpy() for name, p in W.Net(W.CASES[case][2]).named_parameters()}
        moved = max(float(np.abs(expected[name] - start[name]).max()) for name in expected)
        worst_name, worst = max(((name, float(np.abs(got[name] - value).max())) for name, value in expected.items()),
                                key=lambda item: item[1])
        bound = 1.1e-5 * moved if case in NORM_CASES else 0.0
        assert moved > 1e-3, f"{case}: the weights hardly moved ({moved:.3g})"
        assert worst <= bound, f"{case}: {worst_name} differs from one process by {worst:.3g} > {bound:.3g}"

    @pytest.mark.parametrize("case", list(W.CASES))
    def test_state_dicts_and_resume(self, sharded_runs, case):
        """get_state_dict before the first step moves no weight and advances no count; the state tensors are
        DTensors with the parameters' placements; set_state_dict into a new sharded model resumes bit for bit."""
        report, _ = sharded_runs
        assert report[case] == [], f"{case}: {report[case]}"


def _plain_case(case):
    model = W.Net(W.CASES[case][2])
    return model, W.build_optimizer(case, model)


@pytest.mark.parametrize("case", list(W.CASES))
def test_state_creating_step_changes_nothing(case):
    """In one process, get_state_dict before any step (torch's zero-gradient, lr-0 step) makes each parameter's state
    with count 0 and leaves the weights, the lrs and the later steps as without it."""
    model, optimizer = _plain_case(case)
    start = [p.detach().clone() for p in model.parameters()]
    get_state_dict(model, optimizer)
    assert all(torch.equal(a, b) for a, b in zip(start, model.parameters())), f"{case}: a weight moved"
    assert {s["step"] for s in optimizer.state.values() if isinstance(s, dict)} == {0}, case
    assert [g["lr"] for g in optimizer.param_groups] == [W.CASES[case][1]["lr"] / 2, W.CASES[case][1]["lr"]]
    W.train(model, optimizer, range(W.STEPS))
    expected = W.single_process(case)
    for name, param in model.named_parameters():
        assert np.array_equal(param.detach().numpy(), expected[name]), f"{case}: {name} differs"


@pytest.mark.parametrize("case", ["nadam", "lars"])
def test_optimizer_wide_state_crosses_get_and_set_state_dict(case):
    """Nadam's m_schedule and LARS's last lr (optimizer-wide, not per parameter) travel in the param groups of the
    state_dict and return to ``optimizer.state`` on load, so a resumed run equals an unbroken one."""
    key = {"nadam": "m_schedule", "lars": "lars_last_lr"}[case]
    model, optimizer = _plain_case(case)
    W.train(model, optimizer, range(2))
    model_state, optim_state = get_state_dict(model, optimizer)
    assert all(isinstance(k, str) and "." in k for k in optim_state["state"]), list(optim_state["state"])
    assert optim_state["param_groups"][0]["optimizer_state"][key] == optimizer.state[key]
    resumed, resumed_optimizer = _plain_case(case)
    set_state_dict(resumed, resumed_optimizer, model_state_dict={k: v.clone() for k, v in model_state.items()},
                   optim_state_dict=W.copied(optim_state))
    assert resumed_optimizer.state[key] == optimizer.state[key]
    assert all("optimizer_state" not in group for group in resumed_optimizer.param_groups)
    W.train(model, optimizer, range(2, 4))
    W.train(resumed, resumed_optimizer, range(2, 4))
    for (name, a), b in zip(model.named_parameters(), resumed.parameters()):
        assert torch.equal(a, b), f"{case}: resumed {name} differs by {float((a - b).abs().max()):.3g}"
