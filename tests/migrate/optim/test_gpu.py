"""The exact optimizers on CUDA tensors (torch's multi-tensor path) against the CPU's exact results. Skipped without
a CUDA device; ``tests/migrate/optim/test_multi_tensor.py`` runs the same op sequence on CPU tensors in CI.

Bounds: float64 within 1e-12 after 100 steps (LAMB and LARS: within n * 2**-24 of the weights' movement, n = 300 the
largest tensor: the CPU replays MXNet's float sums of squares, CUDA sums in float64); float32 within
100 * 2**-23 * max|w| (one unit in the last place of the largest weight a step: the same operations grouped or fused
otherwise); multi_precision float16/bfloat16 weights with float32 masters: masters within the float32 bound, the
half-precision weights within one unit in their own last place (each the rounding of its master).
"""
import pytest
import torch

from migrate.optim.base import CAPTURABLE
from tests.migrate.optim import multi_tensor_cases as C

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
STEPS = 100
HALF_ULP = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}


def _worst(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


@pytest.mark.parametrize("case", list(C.CASES))
def test_float64_equals_cpu(case):
    """float64 on CUDA within 1e-12 of the CPU's exact weights after 100 steps (LAMB, LARS: the norms' bound)."""
    cpu, _ = C.run(case, STEPS)
    cuda, _ = C.run(case, STEPS, device="cuda")
    moved = _worst(cpu, C.start())
    bound = 300 * 2.0 ** -24 * moved if case in C.NORM_CASES else 1e-12
    assert _worst(cpu, cuda) <= bound, f"{case}: CUDA is {_worst(cpu, cuda):.3g} from the CPU (> {bound:.3g})"


@pytest.mark.parametrize("case", list(C.CASES))
def test_float32_within_one_ulp_a_step(case):
    """float32 on CUDA within 100 * 2**-23 * max|w| of the CPU's exact weights after 100 steps."""
    cpu, _ = C.run(case, STEPS, dtype=torch.float32)
    cuda, _ = C.run(case, STEPS, dtype=torch.float32, device="cuda")
    bound = STEPS * 2.0 ** -23 * max(float(t.abs().max()) for t in cpu)
    assert _worst(cpu, cuda) <= bound, f"{case}: {_worst(cpu, cuda):.3g} > {bound:.3g}"


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", [c for c in C.CASES if c != "test"])
def test_multi_precision(case, half):
    """multi_precision half-precision weights on CUDA: float32 masters within the float32 bound of the CPU's, the
    weights within one unit in their last place (20 steps)."""
    steps = 20
    cpu_weights, cpu_opt = C.run(case, steps, dtype=half, multi_precision=True)
    cuda_weights, cuda_opt = C.run(case, steps, dtype=half, multi_precision=True, device="cuda")
    masters = [(cpu_opt.state[p]["master"], cuda_opt.state[q]["master"].cpu())
               for p, q in zip(_params(cpu_opt), _params(cuda_opt)) if "master" in cpu_opt.state[p]]
    largest = max(float(a.abs().max()) for a, _ in masters)
    assert max(float((a - b).abs().max()) for a, b in masters) <= steps * 2.0 ** -23 * largest, case
    for a, b in zip(cpu_weights, cuda_weights):
        assert float(((a - b).abs() / a.abs().clamp_min(1.0)).max()) <= HALF_ULP[half], case


def _params(optimizer):
    return [p for group in optimizer.param_groups for p in group["params"]]


@pytest.mark.parametrize("case", [c for c in C.CASES if C.CASES[c][0] in CAPTURABLE])
def test_capturable_step_never_syncs_and_replays_in_a_graph(case):
    """capturable=True on CUDA: a step under torch.cuda.set_sync_debug_mode('error') raises nothing; a step captured
    in a CUDA graph and replayed 3 times gives the eager steps' weights within the float32 bound."""
    params, optimizer = _cuda_case(case)
    eager, eager_opt = _cuda_case(case)
    for _ in range(2):  # states made, counts on the device
        optimizer.step()
        eager_opt.step()
    torch.cuda.set_sync_debug_mode("error")
    try:
        optimizer.step()
        eager_opt.step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph):
            optimizer.step()
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(2):
        graph.replay()
    for _ in range(3):
        eager_opt.step()
    torch.cuda.synchronize()
    bound = 10 * 2.0 ** -23 * max(float(p.abs().max()) for p in eager)
    assert _worst([p.detach() for p in params], [p.detach() for p in eager]) <= bound, case


def _cuda_case(case):
    """float32 CUDA parameters with fixed gradients, and the capturable exact optimizer of ``case``."""
    params = [torch.nn.Parameter(t.to("cuda", torch.float32)) for t in C.start()]
    for param, grad in zip(params, C.gradients(0)):
        param.grad = grad.to("cuda", torch.float32)
    return params, C.make(case, params, capturable=True)
