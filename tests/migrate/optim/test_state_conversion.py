"""Tests of migrate.convert_optimizer_state: 50 MXNet steps, hand-over, 50 torch steps == 100 MXNet steps."""
import copy
import pickle

import numpy as np
import pytest
import torch

import migrate
from migrate.errors import InputFileError, StateConversionError
from tests.migrate import _mx_reference as R
from tests.migrate.optim.test_trajectories import TRAJECTORY


def _handed_over(ref, mx_states=None, settings=None, mapping=R.MAPPING):
    """The torch model and optimizer after the hand-over at step 50 (weights copied, states converted)."""
    model = R.torch_model(ref["middle"])
    settings = settings or ref["settings"]
    optimizer = migrate.torch_optimizer(model, settings, mapping)
    migrate.convert_optimizer_state(ref["states"] if mx_states is None else mx_states, settings, mapping, optimizer)
    return model, optimizer


class TestConvertOptimizerState:
    @pytest.mark.parametrize("case, dtype", TRAJECTORY)
    def test_handover_continues_exactly(self, case, dtype):
        """50 MXNet steps + save_states + convert + 50 torch steps equals 100 MXNet steps."""
        ref = R.mx_reference(case, dtype)
        model, optimizer = _handed_over(ref)
        scheduler = migrate.torch_lr_scheduler(optimizer, ref["settings"])
        R.torch_train(model, optimizer, scheduler, ref["data"][50:])
        worst_name, worst = R.largest_difference(ref["final"], model)
        atol = R.tolerance(case, dtype)
        assert worst <= atol, f"{case} {dtype}: {worst_name} differs by {worst:.3g} > {atol}"

    def test_stock_trainer_states_file(self):
        """The file of a stock gluon.Trainer.save_states (no names) hands over as exactly (Nadam, float64)."""
        ref = R.mx_reference("nadam", "float64")
        model, optimizer = _handed_over(ref, mx_states=ref["stock_states"])
        R.torch_train(model, optimizer, migrate.torch_lr_scheduler(optimizer, ref["settings"]), ref["data"][50:])
        worst_name, worst = R.largest_difference(ref["final"], model)
        assert worst <= 1e-12, f"nadam: {worst_name} differs by {worst:.3g}"

    def test_state_values_and_counts_are_copied(self, tmp_path):
        """Adam's mean/var arrays arrive unchanged, each step count is 50, and the scheduler resumes at 50."""
        ref = R.mx_reference("adam", "float64")
        path = tmp_path / "trainer.states"
        path.write_bytes(ref["states"])
        model, optimizer = _handed_over(ref, mx_states=str(path))
        states, _ = pickle.loads(ref["stock_states"])
        for mx_name in ("mlp_fc0_bias", "mlp_fc2_weight"):
            index, key = ref["settings"]["params"][mx_name]["index"], R.MAPPING[mx_name]
            torch_state = optimizer.state[model.get_parameter(key)]
            assert torch_state["step"] == 50
            np.testing.assert_array_equal(torch_state["mean"].numpy(), states[index][0].asnumpy())
            np.testing.assert_array_equal(torch_state["var"].numpy(), states[index][1].asnumpy())
        scheduler = migrate.torch_lr_scheduler(optimizer, ref["settings"])
        assert scheduler.num_update == 50
        assert path.read_bytes() == ref["states"], "the states file must not be modified"


@pytest.mark.parametrize("case", ["nadam", "adam", "ftrl"])
def test_torch_state_dict_round_trip(case):
    """A migrated optimizer saved with state_dict() and loaded into a fresh one continues bit for bit."""
    ref = R.mx_reference(case, "float32")
    runs = []
    for reload in (False, True):
        model, optimizer = _handed_over(ref)
        R.torch_train(model, optimizer, None, ref["data"][50:60])
        if reload:
            saved = copy.deepcopy(optimizer.state_dict())
            optimizer = migrate.torch_optimizer(model, ref["settings"], R.MAPPING)
            optimizer.load_state_dict(saved)
        R.torch_train(model, optimizer, None, ref["data"][60:70])
        runs.append({k: v.detach().clone() for k, v in model.named_parameters()})
    for key in runs[0]:
        assert torch.equal(runs[0][key], runs[1][key]), f"{case}: {key} differs after reloading the state_dict"


def _stock_states(change):
    """gluon.Trainer states of the adam run, with ``change(states)`` applied to the index -> state dict."""
    states, optimizer = pickle.loads(R.mx_reference("adam", "float32")["stock_states"])
    states = dict(states)
    change(states)
    return pickle.dumps((states, optimizer))


def _wider_first_layer(states):
    import mxnet as mx
    index = R.mx_reference("adam", "float32")["settings"]["params"]["mlp_fc0_weight"]["index"]
    states[index] = (mx.nd.zeros((9, 5)), mx.nd.zeros((9, 5)))


def _renamed_header():
    """An LrTrainer states file whose header names another model's parameters."""
    data = R.mx_reference("adam", "float32")["states"]
    return data.replace(b"mlp_fc2_weight", b"net_fc2_weight")


ERRORS = [
    ("states of another model (shapes)", "adam", lambda: _stock_states(_wider_first_layer), StateConversionError,
     r"'mlp_fc0_weight' has shape \(9, 5\).*another model"),
    ("states of another model (index)", "adam", lambda: _stock_states(lambda s: s.update({17: s[0]})),
     StateConversionError, r"index 17.*another model"),
    ("states of another model (names)", "adam", _renamed_header, StateConversionError,
     r"'net_fc2_weight' in the states, 'mlp_fc2_weight' in the settings"),
    ("states of another optimizer", "sgd", lambda: R.mx_reference("adam", "float32")["states"],
     StateConversionError, r"'Adam'.*'sgd'"),
    ("not a states file", "adam", lambda: b"not a pickle", InputFileError, "could not be unpickled"),
    ("missing file", "adam", lambda: "/nonexistent/trainer.states", InputFileError, "Cannot read .*trainer.states"),
    ("wrong type", "adam", lambda: 3.5, InputFileError, "path or bytes, got float"),
]


@pytest.mark.parametrize("description, case, make_states, error, pattern", ERRORS, ids=[e[0] for e in ERRORS])
def test_convert_optimizer_state_errors(description, case, make_states, error, pattern):
    """Bad states raise migrate's own errors naming the parameter or file and what to do."""
    ref = R.mx_reference(case, "float32")
    with pytest.raises(error, match=pattern):
        _handed_over(ref, mx_states=make_states())


def test_stock_optimizer_is_refused():
    """A stock torch optimizer (exact=False) cannot take MXNet states: the error says to use exact=True."""
    ref = R.mx_reference("adam", "float32")
    model = R.torch_model(ref["middle"])
    optimizer, _ = migrate.stock_torch_optimizer(model, ref["settings"], R.MAPPING)
    with pytest.raises(StateConversionError, match="exact=True"):
        migrate.convert_optimizer_state(ref["states"], ref["settings"], R.MAPPING, optimizer)


@pytest.mark.parametrize("keep_last_lr", [True, False])
def test_lars_hand_over_at_an_lr_change(keep_last_lr):
    """LARS handed over at step 30, just before the schedule halves the lr: its momentum correction (momentum *
    lr/last_lr on the next step) needs MXNet's last lr, which convert_optimizer_state carries; without it, torch
    drifts."""
    ref = R.mx_reference("lars", "float64", steps=60)
    model, optimizer = _handed_over(ref)
    assert optimizer.state["lars_last_lr"] == 0.5
    if not keep_last_lr:
        del optimizer.state["lars_last_lr"]
    R.torch_train(model, optimizer, migrate.torch_lr_scheduler(optimizer, ref["settings"]), ref["data"][30:])
    worst_name, worst = R.largest_difference(ref["final"], model)
    if keep_last_lr:
        assert worst <= 1e-12, f"lars: {worst_name} differs by {worst:.3g}"
    else:
        assert worst > 1e-6, f"lars without its last lr should drift, differs by only {worst:.3g}"
