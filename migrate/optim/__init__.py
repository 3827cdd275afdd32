"""Stage 2 of a migration, training settings: ``groups`` (torch param groups from a settings file), ``translate``
(``torch_optimizer``, ``torch_lr_scheduler``), ``exact`` (torch optimizers that replay MXNet 1.9.1's updates, with
their compiled CPU loops in ``_kernels``), ``stock`` (the closest stock ``torch.optim`` optimizer and what differs),
``schedules`` (MXNet's lr schedulers) and ``state_conversion`` (MXNet optimizer states -> torch optimizer
state)."""
