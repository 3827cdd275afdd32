"""Element masks: masked elements and their optimizer state bit-identical, the others update as usual.

Each step is checked against a reference: a fresh trainer on a twin network that takes the masked run's weights and
states (``save_states``/``load_states``) and makes the same step with no mask. The masked run must then equal the
reference on the unmasked elements and its own previous values on the masked ones, bit for bit, for weights on every
context and for every optimizer state array.
"""
import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from gluon_lr import LrTrainer
from tests.gluon_lr.test_freeze import (CONFIGS, OPTIMIZERS, batches, build_net, contexts, make_trainer, state_arrays,
                                        train_step)

NAME = "net_dense1_weight"


def _weights_and_states(trainer, name=NAME):
    """numpy copies of the weight on every context and of every optimizer state array of ``name``."""
    index = [p.name for p in trainer._params].index(name)
    param = trainer._params[index]
    return [d.asnumpy() for d in param.list_data()], [s.asnumpy() for s in state_arrays(trainer, index)]


def _reference_step(net, trainer, opt, config, x, ctx, tmp_path):
    """Weights and states of ``NAME`` after one UNMASKED step from the masked run's current weights and states."""
    twin = build_net(ctx, seed=99)
    for name, param in net.collect_params().items():
        twin.collect_params()[name].set_data(param.data(ctx[0]))
    path = str(tmp_path / "masked.states")
    trainer.save_states(path)
    reference = make_trainer(twin, opt, config)
    reference.load_states(path)
    reference.unfreeze(NAME)  # the states file carries the mask: the reference runs without it
    train_step(twin, reference, x, ctx)
    return _weights_and_states(reference)


def _check(before, after, reference, mask, what):
    """Masked elements as before, the others as in the reference, bit for bit."""
    for kind, k in (("weight", 0), ("state", 1)):
        assert len(after[k]) == len(reference[k]) == len(before[k]) > 0, f"{what}: {kind} arrays missing"
        for j, (old, new, ref) in enumerate(zip(before[k], after[k], reference[k])):
            frozen = np.broadcast_to(mask, new.shape) == 1
            assert np.array_equal(old[frozen], new[frozen]), (
                f"{what}: masked {kind}[{j}] moved, max |diff| {np.abs(old[frozen] - new[frozen]).max():.3g}")
            assert np.array_equal(ref[~frozen], new[~frozen]), (
                f"{what}: unmasked {kind}[{j}] differs from the unmasked reference, max |diff| "
                f"{np.abs(ref[~frozen] - new[~frozen]).max():.3g}")


class TestElementMasks:
    """freeze(name, mask=m) for every optimizer, one and two contexts, update on workers and on the kvstore."""

    @pytest.mark.parametrize("config", list(CONFIGS))
    @pytest.mark.parametrize("opt", list(OPTIMIZERS))
    def test_mask_changing_every_step(self, opt, config, tmp_path):
        """Three steps, a new random mask each step: masked elements and state frozen, the rest as if unmasked."""
        ctx = contexts(CONFIGS[config][0])
        net, data = build_net(ctx), batches(5)
        trainer = make_trainer(net, opt, config)
        for x in data[:2]:
            train_step(net, trainer, x, ctx)
        rng = np.random.RandomState(7)
        for step, x in enumerate(data[2:]):
            mask = (rng.uniform(size=(3, 6)) < 0.5).astype(np.float32)
            trainer.freeze(NAME, mask=mask)
            reference = _reference_step(net, trainer, opt, config, x, ctx, tmp_path)
            before = _weights_and_states(trainer)
            train_step(net, trainer, x, ctx)
            after = _weights_and_states(trainer)
            _check(before, after, reference, mask, f"{opt}/{config} step {step}")
            moved = np.abs(after[0][0] - before[0][0])[mask == 0].min()
            assert moved > 0, f"{opt}/{config}: an unmasked element did not move"
        assert trainer.masked_elements == {NAME: int(mask.sum())}

    def test_unfreeze_clears_the_mask(self):
        """After unfreeze(name) every element updates again."""
        ctx = contexts(1)
        net, data = build_net(ctx), batches(2)
        trainer = make_trainer(net, "adam", "1ctx")
        trainer.freeze(NAME, mask=np.ones((3, 6)))
        before = net[2].weight.data().asnumpy()
        train_step(net, trainer, data[0], ctx)
        assert np.array_equal(before, net[2].weight.data().asnumpy()), "an all-ones mask freezes every element"
        trainer.unfreeze(NAME)
        train_step(net, trainer, data[1], ctx)
        assert (np.abs(net[2].weight.data().asnumpy() - before) > 0).all() and dict(trainer.masked_elements) == {}

    def test_multi_precision_float16(self):
        """float16 weight with multi_precision: the masked elements of the weight AND its float32 master copy stay."""
        mx.random.seed(0)
        weight = mx.gluon.Parameter("w", shape=(4, 5), dtype="float16", init=mx.init.Uniform(0.5))
        weight.initialize(ctx=mx.cpu())
        trainer = LrTrainer([weight], "adam", {"learning_rate": 0.01, "multi_precision": True}, kvstore=None)
        mask = np.eye(4, 5)
        target = nd.array(np.random.RandomState(2).uniform(size=(4, 5)), dtype="float16")
        for step in range(3):
            if step == 1:
                trainer.freeze("w", mask=mask)
                before = [weight.data().asnumpy()] + [s.asnumpy() for s in state_arrays(trainer, 0)]
            with mx.autograd.record():
                loss = ((weight.data() - target) ** 2).sum()
            loss.backward()
            trainer.step(1)
        after = [weight.data().asnumpy()] + [s.asnumpy() for s in state_arrays(trainer, 0)]
        assert after[1].dtype == np.float32 and len(after) == 4, "expected the float32 master weight and two moments"
        for k, (old, new) in enumerate(zip(before, after)):
            assert np.array_equal(old[mask == 1], new[mask == 1]), f"array {k} moved on masked elements"
            assert (old[mask == 0] != new[mask == 0]).any(), f"array {k} did not move on unmasked elements"
