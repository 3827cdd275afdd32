"""``migrate.optim.registry``: one complete record per MXNet 1.9.1 optimizer, duplicates refused, near names named."""
import re

import mxnet as mx
import pytest
import torch

import migrate.optim
from migrate.errors import UnsupportedOptimizerError
import mxupdate
from migrate.optim import base, compiled, stock
from migrate.optim.registry import OptimizerRecord, record, records, register, registered_names


def _full_state_options(entry):
    """Hyperparameters under which ``entry``'s exact optimizer keeps every state buffer (a momentum, centered)."""
    wanted = {"momentum": 0.9, "centered": True} if entry.name != "dcasgd" else {}  # MXNet's DCASGD: momentum 0
    return {key: value for key, value in wanted.items() if key in entry.exact_class.hyperparameters}


def _stepped(entry, dtype=torch.float64, full=True):
    """(parameters, optimizer) after one step of ``entry``'s exact optimizer on two seeded 2-D parameters (under
    ``_full_state_options`` when ``full``, else with momentum 0 and not centered)."""
    generator = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(shape, generator=generator, dtype=dtype)) for shape in ((6, 4), (3, 5))]
    for param in params:
        param.grad = torch.randn(param.shape, generator=generator, dtype=dtype)
    options = _full_state_options(entry) if full else {key: 0.0 if key == "momentum" else False
                                                       for key in _full_state_options(entry)}
    optimizer = entry.exact_class([{"params": params}], lr=0.01, **options)
    optimizer.step()
    return params, optimizer


class TestRecords:
    """records() and the records themselves."""

    def test_every_mxnet_optimizer_is_registered(self):
        """The names the registry accepts are the 19 optimizers MXNet 1.9.1 registers (ccsgd an alias of sgd)."""
        import mxnet.optimizer.contrib  # noqa: F401  (registers groupadagrad)
        builtin = sorted(name for name, cls in mx.optimizer.Optimizer.opt_registry.items()
                         if cls.__module__.startswith("mxnet."))
        assert registered_names() == builtin and len(builtin) == 19
        names = [entry.name for entry in records()]
        assert sorted(migrate.optim.OPTIMIZERS) == names == sorted(set(builtin) - {"ccsgd"})

    @pytest.mark.parametrize("entry", records(), ids=lambda entry: entry.name)
    def test_record_is_complete(self, entry):
        """Exact class, state layouts and a stock class with its builder and state converter (or none of the three)."""
        assert issubclass(entry.exact_class, base.MXNetOptimizer) and migrate.optim.OPTIMIZERS[entry.name] is \
            entry.exact_class
        assert entry.state_names in entry.state_layouts and all(isinstance(n, str) for n in entry.state_names)
        stock_fields = (entry.stock_class, entry.stock_optimizer, entry.stock_state)
        assert all(f is None for f in stock_fields) or (issubclass(entry.stock_class, torch.optim.Optimizer)
                                                        and callable(entry.stock_optimizer)
                                                        and callable(entry.stock_state)), stock_fields
        assert all(callable(getattr(mxupdate.load_kernels(), name)) for name in entry.kernels), entry.kernels

    @pytest.mark.parametrize("entry", records(), ids=lambda entry: entry.name)
    def test_state_names_are_the_buffers_a_step_makes(self, entry):
        """After one step each parameter's tensor buffers are exactly the record's state names, each of the
        parameter's shape (or the record's state_shape)."""
        params, optimizer = _stepped(entry)
        for param in params:
            buffers = {k: v for k, v in optimizer.state[param].items() if torch.is_tensor(v)}
            assert sorted(buffers) == sorted(entry.state_names), (entry.name, sorted(buffers))
            shape = entry.state_shape(param) if entry.state_shape is not None else param.shape
            assert all(tuple(v.shape) == tuple(shape) for v in buffers.values()), entry.name

    @pytest.mark.parametrize("entry", records(), ids=lambda entry: entry.name)
    def test_kernels_are_the_ones_steps_run(self, entry, monkeypatch):
        """Float64 CPU steps with and without a momentum (centered RMSProp or not) run exactly the record's compiled
        kernels (none where the record names none)."""
        called = []
        launch = compiled.launch
        monkeypatch.setattr(compiled, "launch", lambda name, *args: called.append(name) or launch(name, *args))
        _stepped(entry)
        if entry.name not in ("dcasgd", "lars", "lamb"):
            _stepped(entry, full=False)
        assert sorted(set(called)) == sorted(entry.kernels), entry.name

    @pytest.mark.parametrize("entry", [e for e in records() if e.stock_class is not None], ids=lambda e: e.name)
    def test_stock_optimizer_builds_the_stock_class(self, entry):
        """The stock builder returns exactly the record's stock class (the class convert_stock_optimizer_state
        accepts) and the differences as sentences."""
        params = [torch.nn.Parameter(torch.zeros(3, 2))]
        options = dict(_full_state_options(entry), lr=0.1, weight_decay=0.0, rescale_grad=0.5, clip_gradient=None)
        groups = [{"params": params, "lr": 0.1, "weight_decay": 0.0, "lr_mult": 1.0}]  # as param_groups makes them
        optimizer, differences = stock.stock_optimizer(entry.name, groups, options)
        assert type(optimizer) is entry.stock_class
        assert differences and all(isinstance(d, str) and d for d in differences)
        assert any("rescale_grad=0.5" in d for d in differences)


class TestRegister:
    """register(): one record per name."""

    @pytest.mark.parametrize("name, pattern", [
        ("adam", r"MXNet optimizer 'adam' is registered twice \(Adam and SGD\); keep one record per optimizer"),
        ("ccsgd", r"'ccsgd' is read as 'sgd' \(mxformats.settings.OPTIMIZER_ALIASES\); register it under that name"),
    ], ids=["duplicate", "alias"])
    def test_taken_name_is_refused(self, name, pattern):
        """A name registered already (or read as another) raises ValueError and leaves the registry as it was."""
        with pytest.raises(ValueError, match=pattern):
            register(OptimizerRecord(name, migrate.optim.OPTIMIZERS["sgd"], None, None, None, None))
        assert record("adam").exact_class.__name__ == "Adam" and record("ccsgd") is record("sgd")


class TestRecord:
    """record(): lookup by MXNet's name."""

    def test_alias_gives_its_optimizer(self):
        """ccsgd (MXNet's deprecated name of sgd) gives the sgd record."""
        assert record("ccsgd") is record("sgd") and record("sgd").name == "sgd"

    @pytest.mark.parametrize("name, nearest", [
        ("rmsprob", "rmsprop"),
        ("adamw", "adam"),
        ("sgdm", "sgd"),
        ("Ftrl", "ftrl"),
    ])
    def test_unknown_name_names_the_nearest(self, name, nearest):
        """An unknown name raises UnsupportedOptimizerError naming the key, the nearest names and all supported."""
        with pytest.raises(UnsupportedOptimizerError) as caught:
            record(name)
        message = str(caught.value)
        near = re.search(r"nearest names: (\[.*?\])", message)
        assert f"optimizer {name!r} has no torch translation" in message and near, message
        assert repr(nearest) in near.group(1) and "supported: ['adadelta', 'adagrad', 'adam'," in message
