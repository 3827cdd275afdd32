"""Gradual unfreezing: one group per epoch from the head down, over several epochs, with exact resume."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, nd
from mxnet.gluon import nn

from gluon_lr import GradualUnfreezing, LrTrainer, ScheduleError
from tests.gluon_lr.test_freeze import update_counts


def dense_stack(seed=0):
    """Four Dense layers (four layer groups), seeded."""
    mx.random.seed(seed)
    net = nn.HybridSequential(prefix="mlp_")
    with net.name_scope():
        net.add(nn.Dense(6, in_units=3, activation="tanh"), nn.Dense(6, in_units=6, activation="tanh"),
                nn.Dense(6, in_units=6, activation="tanh"), nn.Dense(2, in_units=6))
    net.initialize(mx.init.Uniform(0.5))
    net.hybridize()
    return net


def run_epoch(net, trainer, rng, steps=2):
    """``steps`` Adam steps on random batches."""
    for _ in range(steps):
        x = nd.array(rng.uniform(-1, 1, size=(4, 3)))
        with autograd.record():
            loss = ((net(x) - 0.5) ** 2).sum()
        loss.backward()
        trainer.step(4)


class TestGradualUnfreezing:
    """ULMFiT-style schedule driven by one begin_epoch call per epoch."""

    def test_one_group_per_epoch_over_five_epochs(self):
        """Epoch e trains exactly the last e+1 layers; the others are bit-identical; counts show no lost steps."""
        net, rng = dense_stack(), np.random.RandomState(0)
        trainer = LrTrainer(net, "adam", {"learning_rate": 0.01}, kvstore=None)
        schedule = GradualUnfreezing(trainer, net)
        assert schedule.n_groups == 4 and schedule.trainable_groups == 1
        index = {p.name: i for i, p in enumerate(trainer._params)}
        for epoch in range(5):
            unfrozen = schedule.begin_epoch(epoch)
            trainable = min(4, epoch + 1)
            if 1 <= epoch <= 3:
                assert unfrozen == [f"mlp_dense{4 - trainable}_bias", f"mlp_dense{4 - trainable}_weight"], unfrozen
            else:
                assert unfrozen == [], unfrozen
            before = [layer.weight.data().asnumpy() for layer in net]
            run_epoch(net, trainer, rng)
            for k, layer in enumerate(net):
                moved = np.abs(layer.weight.data().asnumpy() - before[k]).max()
                if k < 4 - trainable:
                    assert moved == 0, f"epoch {epoch}: frozen layer {k} moved by {moved:.3g}"
                    assert update_counts(trainer, index[layer.weight.name]) in ({0: None},), "no update counted"
                else:
                    assert moved > 0, f"epoch {epoch}: trainable layer {k} did not move"
                    since = epoch - max(0, 3 - k)  # the epoch layer k was unfrozen at
                    assert update_counts(trainer, index[layer.weight.name]) == {0: 2 * (since + 1)}

    def test_resume_at_an_epoch_and_every(self):
        """begin_epoch depends only on the epoch: a fresh schedule at epoch 5 with every=2 trains 3 groups."""
        net = dense_stack()
        trainer = LrTrainer(net, "sgd", {"learning_rate": 0.1}, kvstore=None)
        schedule = GradualUnfreezing(trainer, net, every=2)
        schedule.begin_epoch(5)
        assert schedule.trainable_groups == 3
        assert trainer.frozen == {"mlp_dense0_weight", "mlp_dense0_bias"}
        schedule.begin_epoch(0)  # going back re-freezes
        assert trainer.frozen == {f"mlp_dense{k}_{p}" for k in range(3) for p in ("weight", "bias")}

    def test_explicit_groups_and_user_frozen_names_stay_frozen(self):
        """Groups given as Blocks; a parameter the user froze first is never unfrozen by the schedule."""
        net = dense_stack()
        trainer = LrTrainer(net, "sgd", {"learning_rate": 0.1}, kvstore=None)
        trainer.freeze("mlp_dense1_bias")
        schedule = GradualUnfreezing(trainer, [[net[0], net[1]], net[2], net[3]])
        schedule.begin_epoch(9)
        assert trainer.frozen == {"mlp_dense1_bias"}
        assert schedule.groups()[0] == ["mlp_dense0_bias", "mlp_dense0_weight", "mlp_dense1_bias", "mlp_dense1_weight"]


ERRORS = [
    ("groups not a list", lambda t, n: GradualUnfreezing(t, "mlp_*"), ScheduleError, r"non-empty list of groups"),
    ("empty groups", lambda t, n: GradualUnfreezing(t, []), ScheduleError, r"got list \[\]"),
    ("every of zero", lambda t, n: GradualUnfreezing(t, n, every=0), ScheduleError, r"every must be an int >= 1"),
    ("negative epoch", lambda t, n: GradualUnfreezing(t, n).begin_epoch(-1), ScheduleError, r"int >= 0, got -1"),
]


class TestErrors:
    """Bad input raises ScheduleError naming the value and the fix."""

    @pytest.mark.parametrize("description,call,error,pattern", ERRORS, ids=[e[0] for e in ERRORS])
    def test_error(self, description, call, error, pattern):
        """Each bad input raises its error class with a helpful message."""
        net = dense_stack()
        trainer = LrTrainer(net, "sgd", {"learning_rate": 0.1}, kvstore=None)
        with pytest.raises(error, match=pattern):
            call(trainer, net)
