"""Tests of the torch side without MXNet: they run in ./.venv-torch (numpy 2, no mxnet) and in ./.venv alike."""
