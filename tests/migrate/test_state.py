"""Tests of migrate.convert_optimizer_state: 50 MXNet steps, hand-over, 50 torch steps == 100 MXNet steps."""
import pickle

import numpy as np
import pytest

import migrate
from migrate.errors import InputFileError, StateConversionError
from tests.migrate import _mx_reference as R
from tests.migrate.test_optim import LAMB_FLOAT64_ATOL, TRAJECTORY


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
        atol = LAMB_FLOAT64_ATOL if (case, dtype) == ("lamb", "float64") else R.TOLERANCE[dtype]
        assert worst <= atol, f"{case} {dtype}: {worst_name} differs by {worst:.3g} > {atol}"

    def test_state_values_and_counts_are_copied(self, tmp_path):
        """Adam's mean/var arrays arrive unchanged, each step count is 50, and the scheduler resumes at 50."""
        ref = R.mx_reference("adam", "float64")
        path = tmp_path / "trainer.states"
        path.write_bytes(ref["states"])
        model, optimizer = _handed_over(ref, mx_states=str(path))
        states, _ = pickle.loads(ref["states"])
        for index, mx_name in ((0, "mlp_fc0_bias"), (5, "mlp_fc2_weight")):
            key = R.MAPPING[mx_name]
            torch_state = optimizer.state[model.get_parameter(key)]
            assert torch_state["step"] == 50
            np.testing.assert_array_equal(torch_state["mean"].numpy(), states[index][0].asnumpy())
            np.testing.assert_array_equal(torch_state["var"].numpy(), states[index][1].asnumpy())
        scheduler = migrate.torch_lr_scheduler(optimizer, ref["settings"])
        assert scheduler.num_update == 50
        assert path.read_bytes() == ref["states"], "the states file must not be modified"


def _other_model_states():
    """States of an MLP whose first layer is wider: same names and indices, other shapes."""
    ref = R.mx_reference("adam", "float32")
    states, optimizer = pickle.loads(ref["states"])
    import mxnet as mx
    states = dict(states)
    states[1] = (mx.nd.zeros((9, 5)), mx.nd.zeros((9, 5)))
    return pickle.dumps((states, optimizer))


def _extra_index_states():
    ref = R.mx_reference("adam", "float32")
    states, optimizer = pickle.loads(ref["states"])
    return pickle.dumps((dict(states, **{}) | {17: states[0]}, optimizer))


ERRORS = [
    ("states of another model (shapes)", "adam", _other_model_states, StateConversionError,
     r"'mlp_fc0_weight' has shape \(9, 5\).*another model"),
    ("states of another model (index)", "adam", _extra_index_states, StateConversionError,
     r"index 17.*another model"),
    ("states of another optimizer", "sgd", lambda: R.mx_reference("adam", "float32")["states"],
     StateConversionError, r"'Adam'.*'sgd'"),
    ("not a states file", "adam", lambda: b"not a pickle", InputFileError, "could not be unpickled"),
    ("missing file", "adam", lambda: "/nonexistent/trainer.states", InputFileError, "cannot read"),
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
    optimizer, _ = migrate.torch_optimizer(model, ref["settings"], R.MAPPING, exact=False)
    with pytest.raises(StateConversionError, match="exact=True"):
        migrate.convert_optimizer_state(ref["states"], ref["settings"], R.MAPPING, optimizer)
