"""gluon-lr: per-parameter learning rates, weight decay and freezing for MXNet Gluon that hold everywhere."""

__all__ = []
