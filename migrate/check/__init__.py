"""``check_training``: a training step of the MXNet model and of its torch counterpart compared node by node,
gradient by gradient, weight by weight, naming the first difference and its likely cause.

Modules: ``training`` (the comparison), ``mxnet_training`` and ``torch_training`` (each side's step, and its control
run), ``losses`` (the loss written for both), ``rounding`` (when a difference counts: against the control runs'
rounding noise), ``causes`` (the recognised patterns), ``report`` (rows and report).
"""
from migrate.check.report import TensorCheck, TrainingReport
from migrate.check.training import check_training

__all__ = ["TensorCheck", "TrainingReport", "check_training"]
