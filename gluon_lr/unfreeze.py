"""Gradual unfreezing (ULMFiT): train the head first, then unfreeze one layer group per epoch from the head down."""
from mxnet import gluon

from .decay import layer_groups
from .errors import ScheduleError

__all__ = ["GradualUnfreezing"]


class GradualUnfreezing:
    """A schedule that unfreezes one layer group per ``every`` epochs, from the head down, driven by one call per epoch.

    At construction every group but the last (the head) is frozen with ``trainer.freeze``. ``begin_epoch(epoch)``
    then sets the state for that epoch: the last ``1 + epoch // every`` groups trainable, the others frozen. It
    depends only on ``epoch``, so a resumed run calls it with the epoch it resumes at. Unfrozen groups resume
    exactly (their optimizer state and update count stood still while frozen; a group never trained starts fresh).

    Args:
        trainer: The LrTrainer that trains the network.
        groups: The network as a Block (its ``layer_groups``), or a list of groups, input side first, each anything
            ``trainer.freeze`` takes (a Block, a list of Blocks, names, a selector).
        every: Epochs between two unfreezings (ULMFiT: 1).
        n_groups: With a Block, merge its layers into this many groups (``layer_groups(net, n_groups)``).
        hold_norm_stats: Passed to ``trainer.freeze``: hold the running statistics of frozen norm layers.

    Raises:
        ScheduleError: fewer than one group, or ``every`` is not an int >= 1 (and the errors of ``trainer.freeze``
            for a group it cannot select).

    Examples:
        >>> schedule = GradualUnfreezing(trainer, net, n_groups=4)
        >>> for epoch in range(6):
        ...     schedule.begin_epoch(epoch)
        ...     train_one_epoch()
    """

    def __init__(self, trainer, groups, every: int = 1, n_groups: int = None, hold_norm_stats: bool = True):
        if isinstance(groups, gluon.Block):
            groups = layer_groups(groups, n_groups)
        if not isinstance(groups, (list, tuple)) or not groups:
            raise ScheduleError(f"GradualUnfreezing needs the network (a Block) or a non-empty list of groups, got "
                                f"{type(groups).__name__} {groups!r:.60}; pass e.g. net or [net.features, net.output].")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ScheduleError(f"GradualUnfreezing: every must be an int >= 1 (epochs per unfrozen group), got "
                                f"{every!r}; pass e.g. every=1 as in ULMFiT.")
        self._trainer = trainer
        self._every = every
        self._hold = hold_norm_stats
        self._names = [trainer._freezer.select(group) for group in groups]
        self._trainable = 0
        self._mine = set()  # names this schedule froze: only these does it unfreeze
        self._theirs = set(trainer.frozen)  # frozen before the schedule: left frozen
        self._apply(1)

    @property
    def n_groups(self) -> int:
        """The number of groups."""
        return len(self._names)

    @property
    def trainable_groups(self) -> int:
        """How many groups (counted from the head) are trainable now."""
        return self._trainable

    def groups(self) -> list:
        """The parameter names of each group, input side first."""
        return [list(names) for names in self._names]

    def begin_epoch(self, epoch: int) -> list:
        """Set the freeze state for ``epoch`` (0-based): the last ``1 + epoch // every`` groups trainable.

        Args:
            epoch: The epoch about to start, >= 0.

        Returns:
            The names this call unfroze (empty when the state did not change).

        Raises:
            ScheduleError: ``epoch`` is not an int >= 0.

        Examples:
            >>> schedule.begin_epoch(1)    # head and the group below it train from now on
        """
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ScheduleError(f"begin_epoch expects the epoch number, an int >= 0, got {epoch!r}; call it once "
                                f"at the start of each epoch with 0, 1, 2, ...")
        before = set(self._trainer.frozen)
        self._apply(min(self.n_groups, 1 + epoch // self._every))
        return [name for names in self._names for name in names if name in before - set(self._trainer.frozen)]

    def _apply(self, trainable: int) -> None:
        """Freeze all groups but the last ``trainable``; unfreeze those."""
        split = self.n_groups - trainable
        frozen = [name for names in self._names[:split] for name in names]
        keep = set(frozen)
        thawed = [name for names in self._names[split:] for name in names if name in self._mine and name not in keep]
        if thawed:
            self._trainer.unfreeze(thawed)
        if frozen:
            self._trainer.freeze(frozen, hold_norm_stats=self._hold)
        self._mine = (self._mine - set(thawed)) | (keep - self._theirs)
        self._trainable = trainable
