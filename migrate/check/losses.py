"""The loss ``check_training`` gives both models: its value and head gradient on MXNet's outputs, its value in torch.

The per-sample loss follows the labels: none gives a fixed random projection of the outputs (normal weights over
the square root of the values per sample: every output element gets its own nonzero gradient, of order 1), integer
class ids give softmax cross-entropy, float targets of the output's shape give the squared error. MXNet sums the
per-sample losses (``loss.backward()`` on a batch of losses, then ``rescale_grad`` = 1/B from ``trainer.step(B)``);
torch reduces them as ``reduction`` says.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from migrate.errors import LabelsError, OutputMismatchError, UnsupportedLossError

__all__ = ["REDUCTIONS", "BatchLoss", "batch_loss", "check_reduction"]

REDUCTIONS = ("sum", "mean")
"""How torch may reduce the per-sample losses over the batch."""


@dataclass(frozen=True)
class BatchLoss:
    """One loss, written for both frameworks.

    Attributes:
        criterion: ``projection``, ``softmax cross-entropy`` or ``squared error``.
        reduction: torch's reduction over the batch, one of ``REDUCTIONS`` (MXNet always sums).
        batch: the batch size B (the first dimension of the first input).
        targets: per output, the projection weights, or the labels (one output).
    """

    criterion: str
    reduction: str
    batch: int
    targets: tuple

    def describe(self) -> str:
        """One line: the criterion and each side's reduction."""
        return (f"{self.criterion}: MXNet sums it over the batch of {self.batch}, torch takes its "
                f"{self.reduction}")

    def mxnet(self, outputs: list) -> tuple[float, list]:
        """(the summed loss, its gradient with respect to each output) on MXNet's outputs (numpy arrays)."""
        if self.criterion == "projection":
            value = sum(float(np.sum(o.astype(np.float64) * r)) for o, r in zip(outputs, self.targets))
            return value, [r.astype(o.dtype) for o, r in zip(outputs, self.targets)]
        out, target = outputs[0].astype(np.float64), self.targets[0]
        if self.criterion == "squared error":
            difference = out - target
            return float(np.sum(difference ** 2)), [(2 * difference).astype(outputs[0].dtype)]
        shifted = out - out.max(axis=1, keepdims=True)
        probabilities = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
        rows = np.arange(len(target))
        value = -float(np.sum(np.log(probabilities[rows, target])))
        probabilities[rows, target] -= 1.0
        return value, [probabilities.astype(outputs[0].dtype)]

    def torch(self, outputs: list):
        """The loss on torch's outputs (tensors), reduced by ``reduction``: what torch's backward starts from."""
        import torch
        if self.criterion == "softmax cross-entropy":
            labels = torch.from_numpy(self.targets[0]).long()
            return torch.nn.functional.cross_entropy(outputs[0], labels, reduction=self.reduction)
        if self.criterion == "projection":
            total = sum((o * torch.from_numpy(r)).sum() for o, r in zip(outputs, self.targets))
        else:
            total = ((outputs[0] - torch.from_numpy(self.targets[0])) ** 2).sum()
        return total / self.batch if self.reduction == "mean" else total


def check_reduction(loss) -> str:
    """``loss`` if it is one of ``REDUCTIONS``, else UnsupportedLossError naming what the check can run.

    Examples:
        >>> check_reduction("mean")
        'mean'
    """
    if isinstance(loss, str) and loss in REDUCTIONS:
        return loss
    shown = loss if isinstance(loss, str) else type(loss).__name__
    raise UnsupportedLossError(f"loss {shown!r:.60}: check_training runs only a loss it can write identically in "
                               f"MXNet and torch; give 'sum' (torch sums the per-sample losses, as MXNet does before "
                               f"rescale_grad) or 'mean', and choose the per-sample loss by labels: none (a fixed "
                               f"random projection of the outputs), integer class ids of shape (B,) (softmax "
                               f"cross-entropy) or float targets of the output's shape (squared error)")


def batch_loss(loss: str, labels, mx_shapes: list, torch_shapes: list, batch: int, seed: int) -> BatchLoss:
    """The ``BatchLoss`` for models with these output shapes, checked.

    Args:
        loss: torch's reduction, one of ``REDUCTIONS``.
        labels: None, integer class ids of shape (B,), or float targets of the (single) output's shape.
        mx_shapes, torch_shapes: the output shapes of each model, in order.
        batch: B.
        seed: seeds the projection weights.

    Raises:
        UnsupportedLossError: ``loss`` is not one of ``REDUCTIONS``.
        OutputMismatchError: the models' outputs differ in number or shape.
        LabelsError: the labels do not fit the output.

    Examples:
        >>> batch_loss("sum", None, [(4, 5)], [(4, 5)], batch=4, seed=0).criterion
        'projection'
    """
    reduction = check_reduction(loss)
    mx_shapes, torch_shapes = [tuple(s) for s in mx_shapes], [tuple(s) for s in torch_shapes]
    if mx_shapes != torch_shapes:
        raise OutputMismatchError(f"the models' outputs do not correspond: MXNet gives {len(mx_shapes)} output(s) "
                                  f"of shapes {mx_shapes}, torch {len(torch_shapes)} of shapes {torch_shapes}; the "
                                  f"check needs the same outputs in the same order and shapes (wrap the torch model "
                                  f"so that its forward returns what the MXNet graph returns)")
    if labels is None:
        rng = np.random.default_rng(seed + 1)
        weights = tuple((rng.standard_normal(shape) / np.sqrt(max(1, math.prod(shape[1:])))).astype(np.float32)
                        for shape in mx_shapes)
        return BatchLoss("projection", reduction, batch, weights)
    criterion, target = _checked_labels(labels, mx_shapes)
    return BatchLoss(criterion, reduction, batch, (target,))


def _checked_labels(labels, shapes: list) -> tuple:
    """(criterion, labels as an array) for labels that fit the single output of ``shapes``, else LabelsError."""
    array = np.asarray(labels)
    if len(shapes) != 1:
        raise LabelsError(f"labels: the models have {len(shapes)} outputs {shapes}; labels fit a model with one "
                          f"output: drop the labels (the check then projects every output)")
    shape = shapes[0]
    if np.issubdtype(array.dtype, np.integer):
        if len(shape) != 2 or array.shape != shape[:1]:
            raise LabelsError(f"labels: integer class ids must have shape {shape[:1]} for an output of shape "
                              f"{shape} (softmax cross-entropy over its second axis); received shape {array.shape}")
        if array.size and (array.min() < 0 or array.max() >= shape[1]):
            raise LabelsError(f"labels: class ids must lie in [0, {shape[1]}) for an output of {shape[1]} classes; "
                              f"received {int(array.min())} to {int(array.max())}")
        return "softmax cross-entropy", array.astype(np.int64)
    if np.issubdtype(array.dtype, np.floating) and array.dtype.itemsize >= 4:
        if array.shape != shape:
            raise LabelsError(f"labels: float targets must have the output's shape {shape} (squared error); "
                              f"received shape {array.shape}; integer class ids of shape {shape[:1]} give "
                              f"softmax cross-entropy")
        return "squared error", array.astype(np.float32)
    raise LabelsError(f"labels: expected integer class ids or float32/float64 targets; received dtype {array.dtype} "
                      f"of shape {array.shape}")
