#!/usr/bin/env bash
# Creates ./.venv (once) and installs gluon-lr with its pinned dependencies into it. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install --quiet -e ".[test]"
# Test-only model zoos (tests/migrate/test_gluoncv.py, test_transformers.py). --no-deps: their declared
# dependencies would replace the pinned numpy; the tests skip when they are absent.
.venv/bin/python -m pip install --quiet --no-deps gluoncv==0.10.5.post0 gluonnlp==0.10.0
