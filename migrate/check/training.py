"""``check_training``: one training step (or K) of the MXNet model and of its torch counterpart, compared tensor by
tensor in graph order: forward outputs, loss, gradients, then weights, optimizer states and running statistics."""
from __future__ import annotations

import numpy as np

from mxformats import validate
from mxformats.optimizer_state import state_arrays
from mxformats.settings import as_settings
from migrate.check import causes
from migrate.check.losses import batch_loss, check_reduction
from migrate.check.mxnet_training import MXNetTraining
from migrate.check.report import TensorCheck, TrainingReport
from migrate.check.rounding import NOISE_FACTOR, PERTURBATION, tensor_check
from migrate.check.torch_training import TorchTraining
from migrate import arguments
from migrate.errors import ArgumentError, SettingsError
from migrate.mapping.name_mapping import name_mapping
from migrate.mapping.table import NameMapping
from migrate.mapping.weights import converted_tensors
from migrate.optim.state_conversion import split_master, torch_state_of
from migrate.source.packed import packing_consumers
from migrate.source.reading import load_mxnet
from migrate.verification.nodes import node_pairs, seeded_inputs, without_folded_bias

__all__ = ["check_training", "MAX_STEPS"]

MAX_STEPS = 1000
"""The most optimizer steps one check compares: each trains both models and their control runs and compares every
tensor (a difference in the update shows from the first step; a schedule's within a few)."""
NOISY = 0.01
"""A tensor whose control difference exceeds this part of its largest value is named in a note: float32 rounding
hides a difference there that float64 would show."""


def check_training(mx_model, torch_model, inputs, *, labels=None, loss="sum", settings=None, states=None,
                   mapping=None, steps=1, optimizer=None, input_dtypes=None, atol=1e-4, float64=False,
                   perturbation=PERTURBATION, seed=0, assume_order=False) -> TrainingReport:
    """Train the MXNet model and the torch model side by side on one batch and say where they first differ.

    Both run in training mode (batch statistics in BatchNorm; Dropout disabled on both sides, as MXNet's masks cannot
    be drawn in torch) from the same weights (the MXNet ones, copied into a copy of the torch model). Compared, in
    graph order: each matched node's forward output, the loss, each mapped parameter's gradient (in torch's layout,
    times each side's ``rescale_grad``), then after each of ``steps`` optimizer steps every weight, optimizer state
    and running statistic.

    In float32 the two frameworks' kernels round differently and training amplifies it (a ReLU input within rounding
    of 0 takes the other branch on one side; a BatchNorm over few values per channel), so the check measures each
    tensor's rounding noise: two control runs train each framework against itself with every parameter multiplied
    by ``1 + perturbation x noise`` (seeded), and a tensor's ``control`` is the larger of the two runs' differences
    (``migrate.check.rounding`` says why). A tensor diverges when its largest absolute difference exceeds
    ``max(atol * max(1, largest |MXNet value|), 10 * control)``; a tensor the control runs leave unchanged keeps the
    ``atol`` rule. On exact twins the differences beyond atol stay within 3x their control (resnet18_v1 against
    torchvision over 3 steps, resnet50_v1 against its generated module; ``tests/migrate/check/test_check.py``), while each
    recognised cause lies over 100x above it. Where a difference follows a known pattern, the row names the likely
    cause with both values: BatchNorm momentum read inverted, torch's unbiased running variance, eps, average
    pooling's ``count_include_pad``, a mean loss with ``rescale_grad`` 1/B, a frozen parameter or a ``fix_gamma``
    scale trained in torch, weight decay, learning rate, clipping or momentum set differently.

    Args:
        mx_model: Gluon ``HybridBlock``, ``(symbol_json_path, params_path)`` or an ``MxSource``; left unchanged.
        torch_model: the torch model; left unchanged (a copy trains).
        inputs: the batch: numpy arrays (one or a list), or shapes (seeded normal floats; integer inputs in
            ``[0, smallest embedding rows)``) with ``input_dtypes``. The first dimension of the first is the batch B.
        labels: None (the loss is a fixed random projection of the outputs), integer class ids of shape (B,)
            (softmax cross-entropy) or float targets of the output's shape (squared error).
        loss: how the torch training reduces the per-sample losses: ``"sum"`` (MXNet's convention: the gradients
            are then scaled by ``rescale_grad`` = 1/B) or ``"mean"``. MXNet always sums.
        settings: the settings document or file (``LrTrainer.export_settings``); None compares forward, loss and
            gradients only (each side's rescale taken as 1/B for a summed loss, 1 for a mean).
        states: MXNet's states file (``trainer.save_states``), path or bytes; both optimizers continue from it.
        mapping: a ``NameMapping`` (``name_mapping``, ``NameMapping.load``); None matches the models.
        steps: optimizer steps K (1 to ``MAX_STEPS``, 1000) on the same batch.
        optimizer: None (migrate's exact optimizer from ``settings``, with ``states``) or a callable
            ``optimizer(model) -> torch.optim.Optimizer`` building yours over the model it is given (its state starts
            empty; optimizer states are then not compared); called once more for the control run's copy.
        input_dtypes: with shapes: None (float32), one dtype, or one per input.
        atol: tolerance (relative above magnitude 1); the control runs can only widen it.
        float64: train both copies in float64 (parameters, optimizer states, float inputs) and judge by ``atol``
            alone, without control runs: rounding then no longer hides a difference below float32's noise (a tensor
            whose control is near its own magnitude, say; the report's notes name them).
        perturbation: the control runs' relative perturbation (in (0, 0.01]; default ``rounding.PERTURBATION``,
            1e-5), or None: no control runs, ``atol`` alone (one training per framework instead of two).
        seed: seeds the inputs built from shapes, the projection loss and the control runs' noise.
        assume_order: take ``states`` of a stock Trainer that name no parameters in the settings' order
            (``convert_optimizer_state``'s ``assume_order``); False refuses them.

    Returns:
        A ``TrainingReport``: ``ok``, ``rows`` (``TensorCheck``: difference, ``control``, ``limit``, ``cause``),
        ``first_divergence``.

    Raises:
        UnsupportedLossError: ``loss`` is not one the check can run in both frameworks.
        LabelsError: ``labels`` do not fit the output (shape, dtype, class range).
        OutputMismatchError: the models' outputs differ in number or shape.
        ModelTypeError: ``torch_model`` is not a ``torch.nn.Module`` instance.
        ArgumentError: ``steps``, ``atol``, ``float64``, ``perturbation``, ``mapping`` or ``optimizer`` is malformed.
        MappingError, SettingsError, StateConversionError, InputShapeError: as ``name_mapping``, ``torch_optimizer``,
            ``convert_optimizer_state`` raise them.

    Examples:
        >>> report = migrate.check_training(net, torchvision.models.resnet18(), (4, 3, 32, 32),
        ...                                 settings="settings.json", steps=3)  # doctest: +SKIP
        >>> report.first_divergence.name, report.first_divergence.cause  # doctest: +SKIP
        ('resnetv10_stage1_batchnorm0_running_var', 'unbiased running variance: ...')
        >>> report.first_divergence.max_abs_diff > 100 * report.first_divergence.control  # doctest: +SKIP
        True

    Note:
        LrTrainer's element masks and held BatchNorm statistics are not replayed on either side. Dropout is off in
        torch however the model is written: its Dropout modules are switched to eval mode and, while the check runs
        it, every dropout function (``F.dropout``, ``torch.dropout``, ``F.alpha_dropout``, ...) is the identity
        (``torch_training.DropoutOff``); the notes name what was switched off. A dropout written by hand (a
        ``torch.bernoulli`` mask) still drops: build such a model with dropout 0.
    """
    reduction = check_reduction(loss)
    atol, float64 = _checked_arguments(torch_model, steps, atol, mapping, float64)
    if perturbation is not None:
        perturbation = validate.check_number(perturbation, "check_training(perturbation)", 0, False, 0.01, True,
                                             error=ArgumentError)
    perturbation = None if float64 else perturbation
    arrays, shapes, dtypes = _batch(inputs, input_dtypes)
    source = load_mxnet(mx_model, shapes, dtypes).live("migrate.check_training (running the MXNet model)")
    if mapping is None:
        mapping = name_mapping(source, torch_model, shapes, input_dtypes=dtypes)
    settings = None if settings is None else as_settings(settings, SettingsError)
    arrays = arrays if arrays is not None else seeded_inputs(shapes, dtypes, mapping, seed)
    if float64:
        arrays = [x.astype(np.float64) if np.issubdtype(x.dtype, np.floating) else x for x in arrays]
    run = _Run(source, torch_model, mapping, settings, states, optimizer, arrays, atol, float64, perturbation, seed,
               assume_order)
    run.first_step(reduction, labels, seed)
    for step in range(1, steps + 1 if settings is not None else 1):
        if step > 1:
            run.later_forward(step)
        run.update(step)
    first = next((row for row in run.rows if not row.ok), None)
    return TrainingReport(first is None, run.rows, first, steps if settings is not None else 0, atol,
                          run.loss.describe(), run.notes(), float64, run.control_description(),
                          None if perturbation is None else NOISE_FACTOR)


def _checked_arguments(torch_model, steps, atol, mapping, float64) -> tuple:
    """(atol, float64) checked; ModelTypeError or ArgumentError naming a malformed argument."""
    arguments.torch_model(torch_model, "check_training(torch_model)")
    if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= MAX_STEPS:
        raise ArgumentError(f"check_training(steps) must be an integer from 1 to {MAX_STEPS} (the optimizer steps to "
                            f"compare), got {steps!r:.40}")
    if mapping is not None and not isinstance(mapping, NameMapping):
        raise ArgumentError(f"check_training(mapping) must be a NameMapping (migrate.name_mapping, NameMapping.load), "
                            f"got {type(mapping).__name__}; a generated module's MXNET_NAMES is a plain dict: pass "
                            f"mapping=None and the models are matched")
    return (arguments.tolerance(atol, "check_training(atol)"),
            arguments.flag(float64, "check_training(float64=...)"))


def _batch(inputs, input_dtypes) -> tuple:
    """(arrays or None, shapes, dtypes) from numpy arrays or from shapes."""
    given = inputs if isinstance(inputs, (list, tuple)) and inputs and isinstance(inputs[0], np.ndarray) else (
        [inputs] if isinstance(inputs, np.ndarray) else None)
    if given is None:
        shapes, dtypes = arguments.normalize_shapes(inputs, input_dtypes)
        return None, shapes, dtypes
    arrays = [np.ascontiguousarray(x) for x in given]
    return arrays, [x.shape for x in arrays], [x.dtype for x in arrays]


class _Run:
    """Both trainings, their control runs, the rows measured so far and the evidence the causes read."""

    def __init__(self, source, torch_model, mapping, settings, states, optimizer, inputs, atol, float64, perturbation,
                 seed, assume_order):
        self.source, self.mapping, self.settings, self.inputs, self.atol = source, mapping, settings, inputs, atol
        self.float64, self.states_given, self.perturbation = float64, states is not None, perturbation
        self.pairs = node_pairs(source, mapping, torch_model)
        ops = [p[0] for p in self.pairs]
        self.torch = TorchTraining(torch_model, source.params, mapping, settings, states, optimizer, float64,
                                   assume_order=assume_order)
        self.mx = MXNetTraining(source, inputs, ops, settings, states, float64)
        self.mx_control, self.torch_control = (None, None) if perturbation is None else (
            MXNetTraining(source, inputs, ops, settings, states, perturb=perturbation, seed=seed + 2),
            TorchTraining(torch_model, source.params, mapping, settings, states, optimizer, perturb=perturbation,
                          seed=seed + 3, assume_order=assume_order))
        self.batch = int(inputs[0].shape[0]) if inputs[0].ndim else 1
        self.rows, self.loss = [], None
        self.evidence = causes.Evidence(self.mx.symbol, dict(self.torch.model.named_modules()), mapping, settings,
                                        self.batch, set(ops))
        self.evidence.torch_side, self.evidence.mx_optimizer = self.torch, self.mx.optimizer
        self.evidence.inputs = inputs

    def first_step(self, reduction, labels, seed) -> None:
        """Step 1's forward outputs, loss and gradients (all sides run backward)."""
        self._before(1)
        modules = [p[1] for p in self.pairs]
        mx_nodes, mx_final = self.mx.forward()
        torch_nodes, torch_final = self.torch.forward(self.inputs, modules)
        controls = self._control_forward(modules)
        self.loss = batch_loss(reduction, labels, [o.shape for o in mx_final],
                               [tuple(o.shape) for o in torch_final], self.batch, seed)
        self.evidence.loss = self.loss
        self.evidence.norm_counts = {op: out.size // out.shape[1] for op, out in mx_nodes.items() if out.ndim > 1}
        self._add(self._forward_rows(mx_nodes, torch_nodes, controls))
        self._loss_and_backward(1, mx_final, torch_final, controls)
        self._add(self._gradient_rows())

    def later_forward(self, step) -> None:
        """Step ``step``'s forward and loss (after the earlier updates), and the backward passes."""
        self._before(step)
        _, mx_final = self.mx.forward()
        _, torch_final = self.torch.forward(self.inputs)
        self._loss_and_backward(step, mx_final, torch_final, self._control_forward(()))

    def _control_forward(self, modules) -> tuple | None:
        """The control runs' forward: (MXNet op -> output, final outputs, torch module -> output, final outputs), or
        None without control runs."""
        if self.mx_control is None:
            return None
        return self.mx_control.forward() + self.torch_control.forward(self.inputs, modules)

    def update(self, step) -> None:
        """One optimizer step on each side; the weights, states and running statistics after it."""
        ev = self.evidence
        ev.mx_gradients = self.mx.gradients()
        ev.mx_lrs, ev.torch_lrs = self.mx.step(), self.torch.step()
        if self.mx_control is not None:
            self.mx_control.step()
            self.torch_control.step()
        ev.mx_after, ev.torch_after = self.mx.arrays(), self.torch.arrays()
        self._add(self._after_step_rows(step))

    def _before(self, step) -> None:
        """Both sides' values before step ``step``'s forward (which moves the running statistics)."""
        self.evidence.step, self.evidence.mx_before = step, self.mx.arrays()
        self.evidence.torch_before = self.torch.arrays()

    def _add(self, rows) -> None:
        for row in rows:
            if not row.ok:
                row.cause = causes.likely_cause(row, self.evidence)
            self.rows.append(row)

    def _forward_rows(self, mx_nodes, torch_nodes, controls) -> list:
        packed = packing_consumers(self.source.document)
        mx_control, _, torch_control, _ = controls if controls is not None else ({}, None, {}, None)
        rows = []
        for op, module, bias in self.pairs:
            if op in packed:
                rows.append(TensorCheck(op, module, "forward", 1, None, 0.0, True,
                                        f"not compared: MXNet packs the tensor with others through {packed[op]}"))
                continue
            note = f"without {bias!r} (folded into the next BatchNorm)" if bias else ""
            mx_out = without_folded_bias(mx_nodes.get(op), self.source.params.get(bias))
            control = without_folded_bias(mx_control.get(op), self.source.params.get(bias))
            rows.append(tensor_check(op, module, "forward", 1, mx_out, torch_nodes.get(module), self.atol,
                                     (control, torch_control.get(module)), note))
        return rows

    def _loss_and_backward(self, step, mx_final, torch_final, controls) -> None:
        mx_value, heads = self.loss.mxnet(mx_final)
        torch_loss = self.loss.torch(torch_final)
        scaled = (mx_value * self._mx_rescale(), float(torch_loss.detach()) * self._torch_rescale(None))
        self.evidence.losses[step] = (mx_value, float(torch_loss.detach())) + scaled
        control = (None, None)
        if controls is not None:
            (control_value, control_heads), control_loss = self.loss.mxnet(controls[1]), self.loss.torch(controls[3])
            control = (np.array(control_value * self._mx_rescale()),
                       np.array(float(control_loss.detach()) * self._torch_rescale(None)))
            self.mx_control.backward(control_heads)
            control_loss.backward()
        self._add([tensor_check("loss", "loss", "loss", step, np.array(scaled[0]), np.array(scaled[1]), self.atol,
                                control, "times each side's rescale_grad")])
        self.mx.backward(heads)
        torch_loss.backward()

    def _mx_rescale(self) -> float:
        return float(self.settings["optimizer"]["rescale_grad"]) if self.settings is not None else 1 / self.batch

    def _torch_rescale(self, key) -> float:
        if self.torch.optimizer is None:
            return 1 / self.batch if self.loss.reduction == "sum" else 1.0
        if key is None:
            return float(self.torch.optimizer.param_groups[0].get("rescale_grad", 1.0))
        return self.torch.rescale(key)

    def _gradient_rows(self) -> list:
        mx_grads, torch_grads = self.mx.gradients(), self.torch.gradients()
        mx_control = self.mx_control.gradients() if self.mx_control is not None else {}
        torch_control = self.torch_control.gradients() if self.torch_control is not None else {}
        self.evidence.gradients, rows = {}, []
        for name in self.mapping:
            entry, key = self.mapping.entry(name), self.mapping[name]
            if name not in mx_grads or entry.get("held") is not None:
                continue
            if entry.get("fold"):
                rows.append(TensorCheck(name, key, "gradient", 1, None, 0.0, True, "not compared: folded into the "
                                        "next BatchNorm (no torch parameter; its gradient is 0 in exact arithmetic)"))
                continue
            mx_grad = self.mapping.to_torch(name, mx_grads[name]) * self._mx_rescale()
            torch_grad = torch_grads.get(key)
            if torch_grad is None:
                rows.append(TensorCheck(name, key, "gradient", 1, float(np.abs(mx_grad).max()),
                                        float(np.abs(mx_grad).max()), False, "torch computed no gradient"))
                continue
            torch_grad = torch_grad * self._torch_rescale(key)
            controls = (self.mapping.to_torch(name, mx_control[name]) * self._mx_rescale() if name in mx_control
                        else None, torch_control[key] * self._torch_rescale(key) if key in torch_control else None)
            self.evidence.gradients[name] = (mx_grad, torch_grad)
            rows.append(tensor_check(name, key, "gradient", 1, mx_grad, torch_grad, self.atol, controls,
                                     "times rescale_grad"))
        return rows

    def _after_step_rows(self, step) -> list:
        expected = self._torch_values(self.evidence.mx_after)
        mx_control, torch_control = {}, {}
        if self.mx_control is not None:  # less the perturbation: how far it carried through training
            mx_control = self._torch_values(_less(self.mx_control.arrays(), self.mx_control.perturbation))
            torch_control = _less(self.torch_control.arrays(), self.torch_control.perturbation)
        names = {}
        for name in self.mapping:
            names.setdefault(self.mapping[name], []).append(name)
        buffers = {k for k, _ in self.torch.model.named_buffers()}
        rows = []
        for key in list(names) + [k for k in expected if k not in names and "num_batches_tracked" not in k]:
            label = " + ".join(names.get(key, ["(no MXNet tensor)"]))
            kind = "running statistic" if key in buffers else "weight"
            rows.append(tensor_check(label, key, kind, step, expected[key], self.evidence.torch_after[key],
                                     self.atol, (mx_control.get(key), torch_control.get(key))))
            rows += self._state_rows(step, names.get(key, []), key)
        return rows

    def _torch_values(self, mx_arrays) -> dict:
        """torch key -> numpy value of MXNet's arrays (name -> array), converted as the weights are."""
        return {key: t.numpy() for key, t in converted_tensors(mx_arrays, self.mapping, self.torch.model)}

    def _state_rows(self, step, names, key) -> list:
        """The optimizer state arrays of ``key`` (migrate's exact optimizer only: a stock one names them its way)."""
        trained = [n for n in names if not self.mapping.entry(n).get("fold") and self.mx.state(n) is not None]
        if not self.torch.exact or not trained:
            return []
        name = trained[0]
        expected = self._torch_states(self.mx, name)
        mx_control = self._torch_states(self.mx_control, name) if self.mx_control is not None else {}
        held = self.torch.state(key)
        torch_control = self.torch_control.state(key) if self.torch_control is not None else {}
        return [tensor_check(f"{name}:{s}", f"{key}:{s}", "state", step, value, held.get(s), self.atol,
                             (mx_control.get(s), torch_control.get(s))) for s, value in expected.items() if s != "step"]

    def _torch_states(self, side, name) -> dict:
        """The optimizer state of MXNet parameter ``name`` on ``side`` (an ``MXNetTraining``) as migrate's exact
        optimizer names and lays it out: state name -> numpy array."""
        optimizer = self.settings["optimizer"]["name"]
        master, rest = split_master(optimizer, _numpy(side.state(name)), self.settings, name)
        arrays = [self.mapping.to_torch(name, a) for a in state_arrays(rest)]
        return dict(torch_state_of(optimizer, name, arrays, 0),
                    **({"master": self.mapping.to_torch(name, master)} if master is not None else {}))

    def control_description(self) -> str:
        """The control runs in words, or "" (none: float64, or no perturbation)."""
        if self.mx_control is None:
            return ""
        return (f"each framework against itself with every parameter times 1 + {self.perturbation:g} x noise "
                f"(seeded): each tensor's rounding noise, the larger of the two shown")

    def notes(self) -> list:
        """What the check changed or could not compare, one sentence each."""
        notes = []
        torch_dropouts = self.torch.dropouts + self.torch.dropout_calls()
        if self.mx.dropouts or torch_dropouts:
            notes.append(f"Dropout disabled on both sides (MXNet's masks cannot be drawn in torch): MXNet "
                         f"{', '.join(self.mx.dropouts) or 'none'}; torch {', '.join(torch_dropouts) or 'none'}")
        if self.settings is None:
            notes.append("no settings: forward outputs, loss and gradients only (no optimizer step)")
            if self.states_given:
                notes.append("the states were not used: without settings no optimizer runs")
        elif not self.torch.exact:
            notes.append("the torch optimizer was given: its states start empty and are not compared")
        noisy = [r for r in self.rows if r.control is not None and r.control > NOISY * r.scale]
        if noisy:
            notes.append(f"the control runs move {len(noisy)} tensors by over {NOISY:.0%} of their largest value "
                         f"({', '.join(r.name for r in noisy[:4])}{' ...' if len(noisy) > 4 else ''}): float32 "
                         f"rounding there hides a difference below {NOISE_FACTOR:g}x that; float64=True (--float64) "
                         f"compares them without rounding")
        skipped = [r.name for r in self.rows if r.ok and not r.compared]
        if skipped:
            notes.append(f"{len(skipped)} tensors not compared: {', '.join(skipped[:6])}"
                         f"{' ...' if len(skipped) > 6 else ''} (see each row's note)")
        return notes


def _less(values: dict, offsets: dict) -> dict:
    """``values`` with ``offsets[key]`` subtracted where there is one."""
    return {key: value - offsets[key] if key in offsets else value for key, value in values.items()}


def _numpy(state):
    """An MXNet optimizer state (NDArrays, None, scalars, nested tuples) with numpy arrays for the NDArrays."""
    if isinstance(state, (tuple, list)):
        return type(state)(_numpy(item) for item in state)
    return state.asnumpy() if hasattr(state, "asnumpy") else state
