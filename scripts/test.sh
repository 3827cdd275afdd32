#!/usr/bin/env bash
# Sets everything up and runs the whole test suite, tutorials included. Extra arguments go to pytest.
# Two environments: ./.venv (the MXNet side and everything: scripts/setup.sh) runs the suite; ./.venv-torch (the torch
# side alone, numpy 2, no mxnet: scripts/setup_torch_env.sh) runs the torch-side tests that tests/test_torch_env.py
# starts in it, against MXNet runs made in ./.venv.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_torch_env.sh
export MPLBACKEND=Agg OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} GLUON_LR_REQUIRE_TORCH_ENV=1
exec .venv/bin/python -m pytest "$@"
