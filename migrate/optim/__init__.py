"""Stage 2 of a migration, training settings: MXNet's optimizers, lr schedules and optimizer states in torch.

``registry`` holds one ``OptimizerRecord`` per MXNet 1.9.1 optimizer: its exact torch class (which replays MXNet's
update, on the machinery of ``base``; MXNet's kernels compiled for CPU tensors through ``compiled``, torch's
multi-tensor ops elsewhere; DTensor shards through ``sharded``), its closest stock ``torch.optim``
counterpart and the converters of its saved state. The optimizers live by family: ``sgd_family`` (sgd, nag, signum,
sgld, dcasgd, test), ``large_batch`` (lars, lbsgd), ``adam_family`` (adam, adamax, nadam, lamb, ftml) and
``adagrad_family`` (adagrad, groupadagrad, adadelta, rmsprop, ftrl); each registers its records when imported, and
this package imports them all. Around them: ``groups`` (torch param groups from a settings file), ``translate``
(``torch_optimizer``, ``stock_torch_optimizer``, ``torch_lr_scheduler``), ``schedules`` (MXNet's lr schedulers),
``mx_states`` (reading MXNet trainer states), ``state_conversion`` and ``stock_state`` (MXNet optimizer states ->
the exact or the stock torch optimizer's state).

Examples:
    >>> from migrate.optim import OPTIMIZERS, record
    >>> OPTIMIZERS["adam"] is record("adam").exact_class
    True
"""
from migrate.optim import adagrad_family, adam_family, large_batch, sgd_family  # noqa: F401  (they register)
from migrate.optim.base import MXNetOptimizer
from migrate.optim.registry import OptimizerRecord, record, records, registered_names

__all__ = ["OPTIMIZERS", "MXNetOptimizer", "OptimizerRecord", "record", "records", "registered_names"]

OPTIMIZERS = {entry.name: entry.exact_class for entry in records()}
"""MXNet optimizer name -> migrate's exact torch optimizer class (from the registry; aliases such as ``ccsgd`` are
read as their optimizer's name by ``mxformats.settings``)."""
