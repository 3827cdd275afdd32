"""Tests of gluon_lr._fused: the fast update path against the stock Trainer."""
