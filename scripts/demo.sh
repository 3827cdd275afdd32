#!/usr/bin/env bash
# Sets everything up (./.venv) and runs the main job: fine-tune with LrTrainer, then migrate to PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export MPLBACKEND=Agg
exec .venv/bin/python -m tutorials.demo "$@"
