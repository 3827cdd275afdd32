"""Tests of migrate.generate: the translated ops against MXNet, generated modules of custom blocks and zoo models."""
