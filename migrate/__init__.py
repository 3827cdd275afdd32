"""migrate: carry gluon-lr settings, weights and optimizer state from MXNet Gluon to PyTorch."""

__all__ = []
