"""torch's multi-tensor path of the exact optimizers (``compiled=False``: the path CUDA tensors take), on CPU tensors:
its numbers against the compiled kernels, its operator count per step, and ``capturable=True`` (no host
synchronisation).

The same op sequence runs on CUDA (``tests/migrate/optim/test_gpu.py`` checks it there when a GPU is at hand).
"""
import collections
import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from migrate.optim import OPTIMIZERS
from migrate.optim.base import CAPTURABLE
from tests.migrate.optim import multi_tensor_cases as C

STEPS = 100
#: Optimizers whose MXNet update is per parameter (or per chunk of parameters), so their torch path is too:
#: SGLD draws each parameter's noise in MXNet's order, LBSGD keeps per-parameter gradient sums, GroupAdaGrad takes
#: a mean over each weight's rows, LARS updates chunks of MXNET_OPTIMIZER_AGGREGATION_SIZE (4) tensors.
PER_PARAMETER = {"sgld", "lbsgd", "groupadagrad", "lars"}
#: The most aten operator calls one step of a group may take on the multi-tensor path (whatever its tensor count).
MAX_OPS_PER_GROUP = 50


def _largest(tensors):
    return max(float(t.abs().max()) for t in tensors)


@pytest.mark.parametrize("case", list(C.CASES))
class TestSameNumbersAsCompiled:
    """100 steps on the multi-tensor path (compiled=False) against the compiled kernels (or the same torch ops, for
    the optimizers MXNet writes in python)."""

    def test_float64_within_1e_12(self, case):
        """float64: within 1e-12 after 100 steps; LAMB and LARS within n * 2**-24 of the weights' movement (n = 300,
        the largest tensor: MXNet's float sums of n squares, which the compiled path replays, are within that of
        the float64 sums torch's path takes)."""
        exact, _ = C.run(case, STEPS)
        torch_path, _ = C.run(case, STEPS, compiled=False)
        moved = max(float((a - b).abs().max()) for a, b in zip(exact, C.start()))
        worst = max(float((a - b).abs().max()) for a, b in zip(exact, torch_path))
        bound = 300 * 2.0 ** -24 * moved if case in C.NORM_CASES else 1e-12
        assert moved > 0.05, f"{case}: the weights hardly moved ({moved:.3g})"
        assert worst <= bound, f"{case}: the multi-tensor path is {worst:.3g} from the compiled one (> {bound:.3g})"

    def test_float32_within_one_ulp_a_step(self, case):
        """float32: within 100 * 2**-23 * max|w| after 100 steps: the same operations in another order (fused
        multiply-adds, products grouped otherwise) may round each weight one unit in the last place apart per
        step; what the state carries over decays (momentum < 1, moving averages)."""
        exact, _ = C.run(case, STEPS, dtype=torch.float32)
        torch_path, _ = C.run(case, STEPS, dtype=torch.float32, compiled=False)
        worst = max(float((a - b).abs().max()) for a, b in zip(exact, torch_path))
        bound = STEPS * 2.0 ** -23 * _largest(exact)
        assert worst <= bound, f"{case}: float32 paths {worst:.3g} apart (> {bound:.3g})"


class _Counter(TorchDispatchMode):
    """Counts the aten operators called (each a kernel launch on CUDA; a foreach operator launches one kernel per
    chunk of its tensor list) and the host synchronisations (``_local_scalar_dense``: ``.item()``, ``float(t)``)."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func] += 1
        return func(*args, **(kwargs or {}))


def step_ops(case, copies, **options):
    """(aten calls, host syncs) of the third multi-tensor step of ``case`` on ``copies`` x SHAPES tensors."""
    params = [torch.nn.Parameter(t.clone()) for t in C.start() * copies]
    optimizer = C.make(case, params, compiled=False, **options)
    for step in range(3):
        for param, grad in zip(params, C.gradients(step) * copies):
            param.grad = grad
        if step < 2:
            optimizer.step()
    with _Counter() as counter:
        optimizer.step()
    syncs = sum(n for op, n in counter.ops.items() if "_local_scalar_dense" in str(op))
    return sum(counter.ops.values()), syncs


@pytest.mark.parametrize("case", [c for c in C.CASES if C.CASES[c][0] not in PER_PARAMETER])
def test_ops_per_step_do_not_grow_with_tensors(case):
    """One step of 2 groups takes the same aten calls for 4 or 40 tensors, at most MAX_OPS_PER_GROUP per group."""
    few, _ = step_ops(case, 1)
    many, _ = step_ops(case, 10)
    assert few == many, f"{case}: {few} aten calls for 4 tensors, {many} for 40"
    assert many <= 2 * MAX_OPS_PER_GROUP, f"{case}: {many} aten calls per step"


@pytest.mark.parametrize("case", sorted(PER_PARAMETER))
def test_per_parameter_optimizers_stay_per_parameter(case):
    """SGLD, LBSGD, GroupAdaGrad and LARS follow MXNet's per-parameter (per-chunk) updates: their calls grow with the
    tensor count, and no more than linearly (at most 40 per tensor)."""
    few, _ = step_ops(case, 1)
    many, _ = step_ops(case, 10)
    assert few < many <= 40 * 40, (case, few, many)


CAPTURABLE_CASES = [case for case in C.CASES if C.CASES[case][0] in CAPTURABLE]


@pytest.mark.parametrize("case", CAPTURABLE_CASES)
class TestCapturable:
    """capturable=True (where torch's counterpart offers it): update counts and per-step scalars on the device."""

    def test_no_host_sync_and_ops_independent_of_tensors(self, case):
        """A step calls no _local_scalar_dense (no .item(), float(tensor)) and the same aten calls for 4 or 40
        tensors."""
        few, few_syncs = step_ops(case, 1, capturable=True)
        many, many_syncs = step_ops(case, 10, capturable=True)
        assert (few_syncs, many_syncs) == (0, 0), f"{case}: {few_syncs} and {many_syncs} host syncs per step"
        assert few == many <= 2 * MAX_OPS_PER_GROUP, (case, few, many)

    @pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
    def test_numbers(self, case, dtype):
        """Against the default path after 100 steps: float64 within 1e-12 (Adam: 2**-23 of the weights' movement,
        its bias-corrected lr rounded to float32 on the device where MXNet parses a decimal, one unit in the last
        place apart at most; LAMB: the NORM_CASES bound); float32 within one ulp of max|w| a step. Counts are 0-dim
        tensors on the parameters' device."""
        exact, _ = C.run(case, STEPS, dtype=dtype)
        captured, optimizer = C.run(case, STEPS, dtype=dtype, capturable=True)
        moved = max(float((a - b).abs().max()) for a, b in zip(exact, C.start()))
        worst = max(float((a - b).abs().max()) for a, b in zip(exact, captured))
        if dtype == torch.float32:
            bound = STEPS * 2.0 ** -23 * _largest(exact)
        else:
            bound = {"lamb": 300 * 2.0 ** -24 * moved, "adam": 2.0 ** -23 * moved}.get(case, 1e-12)
        assert worst <= bound, f"{case} {dtype}: capturable is {worst:.3g} from the default path (> {bound:.3g})"
        counts = [s["step"] for s in optimizer.state.values() if isinstance(s, dict)]
        assert all(torch.is_tensor(c) and c.dim() == 0 and float(c) == STEPS for c in counts), case


@pytest.mark.parametrize("name, error, pattern", [
    ("sgd", TypeError, r"SGD has no capturable=True: torch's counterpart \(torch.optim.SGD\) offers none; the "
                       r"optimizers that do: adadelta, adam, adamax, ftml, lamb, nadam, rmsprop"),
    ("ftrl", TypeError, r"Ftrl has no capturable=True: torch's counterpart \(torch.optim.Adagrad\) offers none"),
], ids=["sgd", "ftrl"])
def test_capturable_refused_where_torch_has_none(name, error, pattern):
    """capturable=True on an optimizer whose torch counterpart has no capturable: a TypeError naming those that do."""
    with pytest.raises(error, match=pattern):
        OPTIMIZERS[name]([torch.nn.Parameter(torch.zeros(2))], lr=0.1, capturable=True)


@pytest.mark.parametrize("case", ["adam", "lamb", "ftml", "nadam"])
def test_state_dict_saved_without_the_options_loads(case):
    """A state_dict saved before the compiled and capturable options existed (its groups lack them) loads, and the
    next steps equal those of the optimizer that saved it."""
    saved_params = [torch.nn.Parameter(t.clone()) for t in C.start()]
    optimizer = C.make(case, saved_params)
    for step in range(3):
        for param, grad in zip(saved_params, C.gradients(step)):
            param.grad = grad
        optimizer.step()
    old = copy.deepcopy(optimizer.state_dict())  # as torch.load gives it: no tensor shared with the optimizer
    for group in old["param_groups"]:
        del group["compiled"], group["capturable"]
    resumed = [torch.nn.Parameter(p.detach().clone()) for p in saved_params]
    again = C.make(case, resumed)
    again.load_state_dict(old)
    assert all(g["compiled"] and not g["capturable"] for g in again.param_groups)
    for step in range(3, 5):
        for first, second, grad in zip(saved_params, resumed, C.gradients(step)):
            first.grad, second.grad = grad, grad.clone()
        optimizer.step()
        again.step()
    assert all(torch.equal(a, b) for a, b in zip(saved_params, resumed)), case
