"""Tests of migrate.onnx_export: the exports matching reads, made static."""
