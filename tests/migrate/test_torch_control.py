"""Tests of migrate.TorchControl: LrTrainer's freeze semantics on a migrated torch model and its exact optimizer.

The model is the 3-layer MLP of ``_mx_reference`` (its middle layer frozen in the settings), under migrate's exact
Adam; reference runs use the same optimizer without the control's changes, so every expected number is a torch
run the reader can redo.
"""
import numpy as np
import pytest
import torch

import migrate
from migrate.errors import MappingError, UnsupportedOptimizerError
from migrate.migration_folder import OPTIMIZER, WEIGHTS, optimizer_document, torch_save
from tests.migrate import _mx_reference as R


def _setup(optimizer="adam"):
    """(torch model, exact optimizer, control) for the reference MLP; the middle layer (2.*) is frozen."""
    net = R.mx_net("float32")
    settings = R.settings_of(net, optimizer, {"learning_rate": 0.01, "wd": 0.01}, None)
    model = R.torch_net(net)
    opt = migrate.torch_optimizer(model, settings, R.MAPPING)
    return model, opt, migrate.TorchControl(model, opt, R.MAPPING), settings


def _step(model, opt, seed):
    """One optimizer step on a seeded batch."""
    x = torch.from_numpy(np.random.RandomState(seed).normal(size=(4, R.SIZES[0])).astype(np.float32))
    opt.zero_grad()
    model(x).pow(2).sum().backward()
    opt.step()


def _snapshot(model, opt, name):
    """Copies of the parameter ``name``, its state tensors and its step."""
    param = model.get_parameter(name)
    state = opt.state.get(param, {})
    return (param.detach().clone(), {k: v.clone() for k, v in state.items() if torch.is_tensor(v)},
            state.get("step"))


class TestFreeze:
    """freeze/unfreeze by torch or MXNet name: no update, state and count untouched; unfreeze resumes."""

    def test_settings_frozen_layer_is_frozen(self):
        """The settings' frozen layer is frozen in torch: in a frozen group, requires_grad False, unmoved."""
        model, opt, control, _ = _setup()
        assert control.frozen == {"2.weight", "2.bias"}
        before = model.get_parameter("2.weight").detach().clone()
        _step(model, opt, 0)
        assert torch.equal(model.get_parameter("2.weight"), before)

    def test_freeze_keeps_state_and_unfreeze_resumes(self):
        """Frozen for 2 steps by its MXNet name: weight, Adam state and step unchanged; unfrozen by its torch name,
        its next update equals that of a twin run that never froze it and skipped those 2 steps' updates."""
        model, opt, control, _ = _setup()
        twin, twin_opt, _, _ = _setup()
        for seed in range(2):
            _step(model, opt, seed)
            _step(twin, twin_opt, seed)
        assert control.freeze("mlp_fc0_weight") == ["0.weight"]
        kept = _snapshot(model, opt, "0.weight")
        for seed in (2, 3):
            _step(model, opt, seed)
        after = _snapshot(model, opt, "0.weight")
        assert torch.equal(kept[0], after[0]) and kept[2] == after[2] == 2
        assert all(torch.equal(kept[1][k], after[1][k]) for k in kept[1])
        assert not model.get_parameter("0.weight").requires_grad
        control.unfreeze("0.weight")
        assert model.get_parameter("0.weight").requires_grad and "0.weight" not in control.frozen
        # the twin reaches the same weights for everything, then takes the same step: 0.weight must agree
        with torch.no_grad():
            for (_, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
                q.copy_(p)
        for p, q in zip(model.parameters(), twin.parameters()):
            if p in opt.state:
                twin_opt.state[q] = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in opt.state[p].items()}
        _step(model, opt, 4)
        _step(twin, twin_opt, 4)
        assert opt.state[model.get_parameter("0.weight")]["step"] == 3
        assert torch.equal(model.get_parameter("0.weight"), twin.get_parameter("0.weight"))

    def test_unfreeze_settings_frozen_layer_trains(self):
        """The layer frozen in MXNet, unfrozen in torch, moves at its lr (lr_mult 1: 0.01)."""
        model, opt, control, _ = _setup()
        control.unfreeze("mlp_fc1_*")
        group = next(g for g in opt.param_groups if any(p is model.get_parameter("2.weight") for p in g["params"]))
        assert group["lr"] == pytest.approx(0.01) and not group["frozen"]
        before = model.get_parameter("2.weight").detach().clone()
        _step(model, opt, 0)
        assert float((model.get_parameter("2.weight").detach() - before).abs().max()) > 1e-3


class TestMasks:
    """freeze(name, mask=...): masked elements of the weight and of its state stand still, bit for bit."""

    def test_masked_elements_and_state_stay(self):
        """3 steps: masked weight elements equal the start, masked Adam moments stay 0; the others move."""
        model, opt, control, _ = _setup()
        mask = np.zeros((R.SIZES[1], R.SIZES[0]), dtype=np.float32)
        mask[:, ::2] = 1
        control.freeze("0.weight", mask=mask)
        start = model.get_parameter("0.weight").detach().clone()
        for seed in range(3):
            _step(model, opt, seed)
        weight, frozen = model.get_parameter("0.weight").detach(), torch.from_numpy(mask == 1)
        state = opt.state[model.get_parameter("0.weight")]
        assert torch.equal(weight[frozen], start[frozen]) and float((weight - start)[~frozen].abs().min()) > 0
        assert torch.all(state["mean"][frozen] == 0) and torch.all(state["var"][frozen] == 0)
        assert float(state["var"][~frozen].min()) > 0 and state["step"] == 3
        assert control.masked_elements == {"0.weight": int(mask.sum())}
        control.unfreeze("0.weight")
        _step(model, opt, 3)
        assert float((model.get_parameter("0.weight").detach() - start)[frozen].abs().min()) > 0

    @pytest.mark.parametrize("select,mask,pattern", [
        ("0.*", np.zeros((7, 5)), "applies to one parameter"),
        ("0.weight", np.zeros((5, 7)), "torch shape \\(7, 5\\)"),
        ("0.weight", np.full((7, 5), 2.0), "must be 0/1"),
    ])
    def test_bad_masks(self, select, mask, pattern):
        """Several parameters, another shape, values other than 0/1: MappingError naming the fix."""
        _, _, control, _ = _setup()
        with pytest.raises(MappingError, match=pattern):
            control.freeze(select, mask=mask)


    def test_mask_needs_an_exact_optimizer(self):
        """A stock torch optimizer never calls the mask hook: a mask is refused (UnsupportedOptimizerError)."""
        model, _, _, settings = _setup()
        stock = migrate.stock_torch_optimizer(model, settings, R.MAPPING).optimizer
        control = migrate.TorchControl(model, stock, R.MAPPING)
        with pytest.raises(UnsupportedOptimizerError, match="exact optimizers"):
            control.freeze("0.weight", mask=np.zeros((R.SIZES[1], R.SIZES[0])))


class TestSelectors:
    """Selection by torch name, MXNet name, glob or module; nothing selected is an error."""

    def test_selectors(self):
        """A glob over MXNet names, one over torch names and a module pick the same parameters."""
        model, _, control, _ = _setup()
        assert control.select("mlp_fc2_*") == control.select("4.*") == control.select(model[4]) == [
            "4.weight", "4.bias"]

    def test_unknown_selector_names_the_nearest(self):
        """A selector that picks nothing raises MappingError listing near names."""
        _, _, control, _ = _setup()
        with pytest.raises(MappingError, match="selects no parameter.*mlp_fc0_weight"):
            control.freeze("mlp_fc0_weigth")


class TestRates:
    """set_lr_mult / layer_decay / gradual_unfreezing on the optimizer's groups."""

    def test_layer_decay_and_scheduler(self):
        """layer_decay(decay=0.5) over 3 layers: lr_mult 0.25, 0.5, 1; the scheduler keeps them; state kept."""
        model, opt, control, settings = _setup()
        control.unfreeze("2.*")
        _step(model, opt, 0)
        state = opt.state[model.get_parameter("0.weight")]["mean"].clone()
        assert control.layer_decay([model[0], model[2], model[4]], 0.5) == [0.25, 0.5, 1.0]
        scheduler = migrate.torch_lr_scheduler(opt, settings)
        lr_of = {name: g["lr"] for g in opt.param_groups for name, p in model.named_parameters()
                 if any(p is q for q in g["params"])}
        assert lr_of == pytest.approx({"0.weight": 0.0025, "0.bias": 0.0025, "2.weight": 0.005, "2.bias": 0.005,
                                       "4.weight": 0.01, "4.bias": 0.01})
        assert torch.equal(opt.state[model.get_parameter("0.weight")]["mean"], state)
        _step(model, opt, 1)
        scheduler.step()
        assert sorted({round(g["lr"], 12) for g in opt.param_groups if g["params"]}) == [0.0025, 0.005, 0.01]

    def test_gradual_unfreezing(self):
        """epoch 0: only the head trains; epoch 1: the last two layers; epoch 5: all three."""
        model, _, control, _ = _setup()
        layers = [model[0], model[2], model[4]]
        control.gradual_unfreezing(layers, epoch=0)
        assert control.frozen == {"0.weight", "0.bias", "2.weight", "2.bias"}
        control.gradual_unfreezing(layers, epoch=1)
        assert control.frozen == {"0.weight", "0.bias"}
        control.gradual_unfreezing(layers, epoch=5)
        assert control.frozen == frozenset()


class TestHeldNorm:
    """Held BatchNorm statistics: train-mode forwards leave them; unfreeze releases them."""

    def test_hold_and_release(self):
        """Frozen BatchNorm: running stats unchanged by 2 train-mode forwards; unfrozen: they move again."""
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
        groups = [{"params": list(model.parameters()), "lr": 0.1, "weight_decay": 0.0, "lr_mult": 1.0,
                   "wd_mult": 1.0, "frozen": False}]
        opt = migrate.optim.sgd_family.SGD(groups, lr=0.1)
        control = migrate.TorchControl(model, opt)
        control.freeze("1.*")
        assert control.held_norm_layers == ["1"] and model[1].momentum == 0.0
        mean, count = model[1].running_mean.clone(), int(model[1].num_batches_tracked)
        for seed in range(2):
            _step_norm(model, opt, seed)
        assert torch.equal(model[1].running_mean, mean) and int(model[1].num_batches_tracked) == count
        control.unfreeze("1.weight")
        assert control.held_norm_layers == [] and model[1].momentum == 0.1
        _step_norm(model, opt, 2)
        assert float((model[1].running_mean - mean).abs().min()) > 0

    def test_second_control_takes_over(self):
        """A second TorchControl on the same optimizer releases the first one's hold and holds with the true
        momentum (0.1 back on release)."""
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
        groups = [{"params": list(model.parameters()), "lr": 0.1, "weight_decay": 0.0, "lr_mult": 1.0,
                   "wd_mult": 1.0, "frozen": False}]
        opt = migrate.optim.sgd_family.SGD(groups, lr=0.1)
        migrate.TorchControl(model, opt).freeze("1.*")
        second = migrate.TorchControl(model, opt)
        assert second.held_norm_layers == ["1"] and model[1].momentum == 0.0
        second.unfreeze("1.*")
        assert model[1].momentum == 0.1 and not model[1]._forward_hooks


def _step_norm(model, opt, seed):
    """One SGD step of the Linear-BatchNorm model on a seeded batch (train mode)."""
    x = torch.from_numpy(np.random.RandomState(seed).normal(size=(6, 3)).astype(np.float32))
    opt.zero_grad()
    model(x).pow(2).sum().backward()
    opt.step()


class TestLoadMigration:
    """load_migration rebuilds the control: masks and frozen groups come back."""

    def test_masks_come_back(self, tmp_path):
        """A folder written with a masked control: the loaded optimizer's control holds the same mask."""
        model, opt, control, settings = _setup()
        mask = np.eye(R.SIZES[1], R.SIZES[0], dtype=np.float32)
        control.freeze("mlp_fc0_weight", mask=mask)
        scheduler = migrate.torch_lr_scheduler(opt, settings)
        torch_save(model.state_dict(), tmp_path / WEIGHTS)
        torch_save(optimizer_document(opt, scheduler, settings, R.MAPPING, control), tmp_path / OPTIMIZER)
        fresh = R.torch_net(R.mx_net("float32"))
        loaded, _ = migrate.load_migration(tmp_path, fresh)
        again = migrate.TorchControl.of(loaded)
        assert again.masked_elements == {"0.weight": int(mask.sum())} and again.frozen == {"2.weight", "2.bias"}
        start = fresh.get_parameter("0.weight").detach().clone()
        _step(fresh, loaded, 0)
        assert torch.equal(fresh.get_parameter("0.weight").detach()[torch.from_numpy(mask == 1)],
                           start[torch.from_numpy(mask == 1)])

