#!/usr/bin/env bash
# Creates ./.venv-torch (once) and installs the torch side of gluon-lr into it the way a user who left MXNet has it:
# Python 3.11, numpy >= 2, torch 2.14.1, no mxnet (`pip install gluon-lr` without the [mxnet] extra). The test command
# (scripts/test.sh) runs the torch-side tests in it. Safe to run again: an existing venv is reused and only checked.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV=.venv-torch
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
fi
# The project without extras (its torch side), on numpy 2; pytest and pillow for the tests run in it.
"$VENV/bin/python" -m pip install --quiet -e . "numpy>=2" torch==2.14.1 pytest pillow
if "$VENV/bin/python" -c "import mxnet" >/dev/null 2>&1; then
    echo "setup_torch_env.sh: $VENV must not hold mxnet (it stands for an environment without MXNet): remove $VENV" >&2
    exit 1
fi
"$VENV/bin/python" - <<'PY'
import numpy, torch
assert numpy.lib.NumpyVersion(numpy.__version__) >= "2.0.0", f"numpy {numpy.__version__} in .venv-torch, expected >= 2"
PY
