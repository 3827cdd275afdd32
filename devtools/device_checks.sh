#!/usr/bin/env bash
# The GPU checks of issues 35 and 36 in one call of the device machine (torch with CUDA, no MXNet there):
#   1. generated resnet18_v1 / resnet50_v1 against torchvision, train step and eval, batch 64, float32 and bf16
#      (devtools/generated_speed.py; target within 1.03x);
#   2. the exact optimizers against torch's fused/foreach ones on CUDA, with bytes moved against the bandwidth floor
#      (bench/bench_optim.py --device cuda; targets 1.2x, LAMB 1.5x);
#   3. the exact optimizers on CUDA against the CPU's exact results: float64 within 1e-12 after 100 steps, float32,
#      multi_precision, capturable (tests/migrate/optim/test_gpu.py).
# Here first (./.venv, MXNet): .venv/bin/python -m devtools.generated_speed prepare build/generated_speed
#   and, for a device without pytest: pip install --target build/pylib pytest
# Then run this script on the device, carrying build/generated_speed and build/pylib (build/ is ignored by git).
set -u
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
status=0
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # bench/ scripts import migrate from the work tree
if ! "$python" -c "import pytest" 2>/dev/null; then
    export PYTHONPATH="$PWD/build/pylib${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
"$python" -m devtools.generated_speed run build/generated_speed --batch 64 --repeat 20 || status=1
"$python" bench/bench_optim.py --device cuda --repeat 20 || status=1
"$python" -m pytest -q -p no:cacheprovider tests/migrate/optim/test_gpu.py || status=1
exit $status
