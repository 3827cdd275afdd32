"""generate: write a readable, trainable PyTorch module for an MXNet model that has no torch twin."""
from migrate.generate.writer import generate_torch
from migrate.generate.registry import known_ops
from migrate.generate.sync_batch_norm import SyncBatchNorm, convert_sync_batchnorm

__all__ = ["generate_torch", "known_ops", "convert_sync_batchnorm", "SyncBatchNorm"]
