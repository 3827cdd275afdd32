#!/usr/bin/env bash
# Creates ./.venv (once) and installs the whole project into it: the MXNet side (mxnet 1.9.1, numpy 1.23.5), the
# torch side, the tutorials' and the tests' dependencies, all pinned. Safe to run again.
# The torch side alone (numpy 2, no MXNet) goes into ./.venv-torch: scripts/setup_torch_env.sh.
# MXNET=mxnet-cu112 (or another mxnet-* 1.9.1 build) installs that MXNet variant in place of the CPU one,
# for GPU training; numpy stays at 1.23.5 (MXNet 1.9.1 needs numpy<1.24).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
MXNET=${MXNET:-mxnet}
command -v "$PY" >/dev/null 2>&1 || PY=python3
case "$MXNET" in
    mxnet|mxnet-cu[0-9]*|mxnet-mkl|mxnet-native) ;;
    *) echo "setup.sh: MXNET=$MXNET: expected mxnet or an MXNet variant such as mxnet-cu112" >&2; exit 2 ;;
esac
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install --quiet -e ".[mxnet,tutorials,test]" torch==2.14.1 torchvision==0.29.1
if [ "$MXNET" != mxnet ]; then
    # Same version and the same import name ("mxnet"); the CPU wheel is removed first so the two do not overlap.
    .venv/bin/python -m pip uninstall --quiet --yes mxnet
    .venv/bin/python -m pip install --quiet "$MXNET==1.9.1" "numpy==1.23.5"
fi
# Test-only model zoos (tests/migrate/mapping/test_gluoncv.py, test_transformers.py). --no-deps: their declared
# dependencies would replace the pinned numpy; the tests skip when they are absent.
.venv/bin/python -m pip install --quiet --no-deps gluoncv==0.10.5.post0 gluonnlp==0.10.0
