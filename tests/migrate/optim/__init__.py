"""Tests of migrate.optim: the exact optimizers against MXNet, state conversion, param groups, the registry."""
