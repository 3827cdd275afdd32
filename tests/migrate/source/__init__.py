"""Tests of migrate.source: the ways an MXNet model is read (recorded Blocks, Module checkpoints)."""
