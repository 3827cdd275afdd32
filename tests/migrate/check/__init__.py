"""Tests of migrate.check: check_training and `migrate check`, a cause per fixture, clean pairs, the rounding rule."""
