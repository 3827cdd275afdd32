"""Networks built the way GluonTS 0.17's MXNet models build theirs (plain mxnet.gluon, no GluonTS): each generates and
matches MXNet, in eval and train mode, outputs and the gradients of every parameter and float input (random head
gradients, seeded), within RTOL = 1e-4 of the largest MXNet value. The GaussianProcess/DeepState style runs in
float64 (LAPACK factorizations in float32 would measure rounding, not the translation).

The prediction-style network draws torch's random numbers, never MXNet's: its deterministic outputs are compared as
above and its samples against the distribution its parameters give.
"""
import numpy as np
import pytest
import torch
import mxnet as mx
from mxnet import autograd, gluon

from migrate.generate import generate_torch

RTOL = 1e-4


def _largest_relative(want: np.ndarray, got: np.ndarray, what: str) -> float:
    assert want.shape == got.shape, f"{what}: shape {got.shape}, MXNet {want.shape}"
    return float(np.abs(want - got).max() / max(np.abs(want).max(), 1e-12)) if want.size else 0.0


def _mxnet_run(net, inputs, with_grad, train):
    """MXNet's outputs, parameter gradients (MXNet name -> array) and float input gradients for seeded heads."""
    xs = [mx.nd.array(x, dtype=x.dtype) for x in inputs]
    for x, grad in zip(xs, with_grad):
        if grad:
            x.attach_grad()
    with autograd.record(train_mode=train):
        out = net(*xs)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    rng = np.random.RandomState(5)
    heads = [rng.standard_normal(o.shape).astype(o.dtype) for o in outs]
    autograd.backward(outs, [mx.nd.array(h, dtype=h.dtype) for h in heads])
    params = {name: p.grad().asnumpy() for name, p in net.collect_params().items() if p.grad_req != "null"}
    return [o.asnumpy() for o in outs], heads, params, [x.grad.asnumpy() for x, g in zip(xs, with_grad) if g]


def _torch_run(model, inputs, with_grad, heads):
    xs = [torch.tensor(x, requires_grad=bool(g)) for x, g in zip(inputs, with_grad)]
    out = model(*xs)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    torch.autograd.backward(outs, [torch.from_numpy(h) for h in heads])
    grads = {name: p.grad for name, p in model.named_parameters()}
    return [o.detach().numpy() for o in outs], grads, [x.grad.numpy() for x, g in zip(xs, with_grad) if g]


def _largest_differences(net, inputs, path, with_grad=None) -> dict:
    """Generate ``net`` and run both sides in eval and in train mode: the largest relative difference of the
    outputs, the parameter gradients and the input gradients, per mode (each asserted within RTOL)."""
    with_grad = with_grad or [np.issubdtype(x.dtype, np.floating) for x in inputs]
    model = generate_torch(net, [x.shape for x in inputs], path, input_dtypes=[x.dtype for x in inputs])
    result = {}
    for train in (False, True):
        model.train(train)
        want, heads, want_params, want_inputs = _mxnet_run(net, inputs, with_grad, train)
        model.zero_grad()
        got, got_params, got_inputs = _torch_run(model, inputs, with_grad, heads)
        mode = "train" if train else "eval"
        diffs = {f"{mode} output {i}": _largest_relative(w, g, f"output {i}") for i, (w, g) in
                 enumerate(zip(want, got))}
        for name, grad in want_params.items():
            mine = got_params[model.MXNET_NAMES[name]]
            diffs[f"{mode} gradient {name}"] = _largest_relative(grad, np.zeros_like(grad) if mine is None else
                                                                 mine.numpy(), name)
        diffs.update({f"{mode} gradient of input {i}": _largest_relative(w, g, f"input {i}")
                      for i, (w, g) in enumerate(zip(want_inputs, got_inputs))})
        worst = max(diffs, key=diffs.get)
        assert diffs[worst] <= RTOL, f"{worst}: relative difference {diffs[worst]:.3g}"
        result[mode] = diffs[worst]
    return result


def _initialized(net, seed=0):
    mx.random.seed(seed)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    return net


class GaussianProcessStyle(gluon.HybridBlock):
    """GluonTS's GaussianProcess and DeepState likelihoods: an RBF kernel matrix plus noise on ``F.eye``, its
    Cholesky factor (potrf), a triangular solve (trsm), the log-determinant (sumlogdiag), the predictive variance
    by syrk and gemm, potri's inverse, trmm, and a Kalman-style step over a transition ``F.diag(ones(2)) +
    F.diag(ones(1), k=1)`` (gemm2, inverse, slogdet, det, makediag, extractdiag, extracttrian, maketrian)."""

    def __init__(self, length, **kwargs):
        super().__init__(**kwargs)
        self.length = length
        with self.name_scope():
            self.kernel = gluon.nn.Dense(2, in_units=3, dtype="float64")
            self.noise = gluon.nn.Dense(1, in_units=3, dtype="float64")

    def hybrid_forward(self, F, x, y):
        summary = F.mean(x, axis=1)  # (B, 3)
        amplitude, scale = F.split(F.Activation(self.kernel(summary), act_type="softrelu") + 0.5, 2, axis=1)
        squares = F.sum(F.square(x), axis=2)  # (B, T)
        gram = F.linalg.gemm2(x, x, transpose_b=True)
        distance = F.broadcast_add(F.expand_dims(squares, 2), F.expand_dims(squares, 1)) - 2 * gram
        kernel = F.broadcast_mul(F.expand_dims(amplitude, 2),
                                 F.exp(F.broadcast_div(-distance, F.expand_dims(scale, 2))))
        noise = F.Activation(self.noise(summary), act_type="softrelu") + 0.1
        kernel = kernel + F.broadcast_mul(F.expand_dims(noise, 2), F.eye(self.length, dtype="float64"))
        chol = F.linalg.potrf(kernel)
        alpha = F.linalg.trsm(chol, F.expand_dims(y, 2))
        nll = 0.5 * F.sum(F.square(alpha), axis=(1, 2)) + F.linalg.sumlogdiag(chol)
        solved = F.linalg.trsm(chol, 0.5 * kernel)  # the cross-covariance to new points stands in as K / 2
        variance = F.linalg.extractdiag(F.linalg.gemm(solved, solved, kernel, transpose_a=True, alpha=-1.0))
        inverse = F.linalg.potri(chol) + F.linalg.trmm(chol, kernel, transpose=True, alpha=0.1)
        repacked = F.linalg.maketrian(F.linalg.extracttrian(chol)) - chol
        transition = F.diag(F.ones(shape=(2,), dtype="float64"), k=0) + F.diag(F.ones(shape=(1,), dtype="float64"),
                                                                          k=1)
        state = F.linalg.gemm2(F.broadcast_mul(F.expand_dims(F.ones_like(noise), 2), transition),
                               F.linalg.makediag(F.concat(amplitude, scale, dim=1)))
        covariance = F.linalg.syrk(state) + F.broadcast_mul(F.expand_dims(noise, 2), F.eye(2, dtype="float64"))
        sign, log_det = F.linalg.slogdet(covariance)
        step = F.sum(F.linalg.inverse(covariance), axis=(1, 2)) + log_det * sign + F.linalg.det(covariance)
        return nll, variance, inverse, repacked, step


class TransformerStyle(gluon.HybridBlock):
    """GluonTS's Transformer: a causal mask summed from ``F.eye(d, d, k)`` (``F.zeros_like(F.eye(d))`` plus one
    shifted identity per future step), masked scaled dot-product attention by batch_dot, LayerNorm, a Student-t
    style projection."""

    def __init__(self, length, units, **kwargs):
        super().__init__(**kwargs)
        self.length, self.scale = length, 1 / np.sqrt(units)
        with self.name_scope():
            self.qkv = gluon.nn.Dense(3 * units, flatten=False, in_units=units)
            self.norm = gluon.nn.LayerNorm(in_channels=units)
            self.out = gluon.nn.Dense(3, flatten=False, in_units=units)

    def hybrid_forward(self, F, x):
        mask = F.zeros_like(F.eye(self.length))
        for k in range(self.length - 1):
            mask = mask + F.eye(self.length, self.length, k + 1)
        q, k, v = F.split(self.qkv(x), 3, axis=2)
        scores = F.batch_dot(q, k, transpose_b=True) * self.scale
        weights = F.softmax(F.broadcast_add(scores, F.expand_dims(mask, 0) * -1e9), axis=-1)
        h = self.norm(x + F.batch_dot(weights, v))
        mu, sigma, nu = F.split(self.out(h), 3, axis=2)
        return mu, F.Activation(sigma, act_type="softrelu"), 2.0 + F.Activation(nu, act_type="softrelu")


class MQCNNStyle(gluon.HybridBlock):
    """GluonTS's MQCNN: a dilated causal Conv1D encoder, a Dense decoder and the incremental quantile output
    ``F.cumsum(concat(intercept, relu(increments)), axis=3)`` (``_np_cumsum``), with the quantile loss averaged by
    Gluon's loss convention (``F.mean(..., axis=0, exclude=True)``) at levels 0.25, 0.5, 0.75."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.quantiles = 3
        with self.name_scope():
            self.conv = gluon.nn.Conv1D(4, 2, dilation=2, padding=2, in_channels=2, activation="relu")
            self.decoder = gluon.nn.Dense(6, flatten=False, in_units=4)
            self.intercept = gluon.nn.Dense(1, flatten=False, in_units=3)
            self.increments = gluon.nn.Dense(self.quantiles - 1, flatten=False, in_units=3, activation="relu")

    def hybrid_forward(self, F, x, target):
        encoded = F.slice_axis(self.conv(x), axis=2, begin=0, end=-2)  # causal: padded both sides, the end cut
        decoded = F.reshape(self.decoder(F.transpose(encoded, axes=(0, 2, 1))), shape=(0, 0, 2, 3))  # (B, T, 2, 3)
        quantiles = F.cumsum(F.concat(self.intercept(decoded), self.increments(decoded), dim=-1), axis=3)
        error = F.broadcast_sub(F.expand_dims(F.expand_dims(target, 2), 3), quantiles)
        levels = F.cumsum(F.ones_like(quantiles), axis=3) / (self.quantiles + 1)  # 0.25, 0.5, 0.75
        loss = F.maximum(levels * error, (levels - 1) * error)
        return quantiles, F.mean(loss, axis=0, exclude=True)


class WaveNetLSTNetStyle(gluon.HybridBlock):
    """GluonTS's WaveNet and LSTNet losses: a Conv1D and a GRU (layout NTC) over the series, bin logits scored by
    ``gluon.loss.SoftmaxCrossEntropyLoss`` and the forecast by ``gluon.loss.L1Loss``, both averaging with
    ``F.mean(loss, axis=0, exclude=True)``; an autoregressive skip ``F.sum(..., axis=1, exclude=True)``."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv = gluon.nn.Conv1D(4, 3, padding=1, in_channels=2, activation="relu")
            self.gru = gluon.rnn.GRU(5, layout="NTC", input_size=4)
            self.bins = gluon.nn.Dense(6, flatten=False, in_units=5)
            self.forecast = gluon.nn.Dense(1, flatten=False, in_units=5)
            self.cross_entropy = gluon.loss.SoftmaxCrossEntropyLoss()
            self.l1 = gluon.loss.L1Loss()

    def hybrid_forward(self, F, x, labels, target):
        h = self.gru(F.transpose(self.conv(x), axes=(0, 2, 1)))  # (B, T, 5)
        skip = F.sum(x, axis=(0, 2), exclude=True)  # LSTNet's autoregressive part: a sum over channels, (B, T)
        forecast = F.squeeze(self.forecast(h), axis=2) + skip * 0.1
        return self.cross_entropy(self.bins(h), labels) + self.l1(forecast, target), forecast


class DeepFactorStyle(gluon.HybridBlock):
    """GluonTS's DeepFactor: the series' embedding (``feat_static_cat`` may exceed the embedding's rows: MXNet
    clips the index), two stacked ``gluon.rnn.LSTM(..., layout="NTC")`` (the second reads the first's output, so its
    zero begin states take their batch from shapes after the first RNN node), global factors and a local Gaussian
    likelihood."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embed = gluon.nn.Embedding(4, 3)
            self.global_rnn = gluon.rnn.LSTM(6, layout="NTC", input_size=4)
            self.local_rnn = gluon.rnn.LSTM(5, layout="NTC", input_size=6)
            self.loadings = gluon.nn.Dense(6, in_units=3)
            self.sigma = gluon.nn.Dense(1, flatten=False, in_units=5)

    def hybrid_forward(self, F, category, time_feat, target):
        embedded = self.embed(category)  # (B, 3)
        first = F.expand_dims(F.slice_axis(embedded, axis=1, begin=0, end=1), 1)
        series = F.concat(time_feat, F.tile(first, reps=(1, 5, 1)), dim=2)  # (B, T, 4)
        factors = self.global_rnn(series)  # (B, T, 6)
        fixed = F.sum(F.broadcast_mul(factors, F.expand_dims(self.loadings(embedded), 1)), axis=2)  # (B, T)
        sigma = F.squeeze(F.Activation(self.sigma(self.local_rnn(factors)), act_type="softrelu"), axis=2)
        log_likelihood = -0.5 * F.square((target - fixed) / sigma) - F.log(sigma)
        return F.mean(log_likelihood, axis=1, exclude=True), fixed, sigma


class TestTrainingNetworks:
    """Each GluonTS-style training network: outputs and gradients equal MXNet's (eval and train)."""

    def test_gaussian_process_deep_state(self, tmp_path):
        """_eye, diag and the linalg family in a float64 likelihood."""
        rng = np.random.RandomState(0)
        net = _initialized(GaussianProcessStyle(6, prefix="gp_"))
        net.cast("float64")
        inputs = [rng.uniform(-1, 1, (2, 6, 3)), rng.uniform(-1, 1, (2, 6))]
        _largest_differences(net, inputs, tmp_path / "gp.py")

    def test_transformer(self, tmp_path):
        """A causal mask from _eye(d, d, k), attention, LayerNorm."""
        net = _initialized(TransformerStyle(5, 4, prefix="tf_"))
        _largest_differences(net, [np.random.RandomState(0).uniform(-1, 1, (2, 5, 4)).astype(np.float32)],
                             tmp_path / "tf.py")

    def test_mqcnn(self, tmp_path):
        """Dilated causal Conv1D, _np_cumsum quantiles, a loss averaged with exclude=True."""
        rng = np.random.RandomState(0)
        net = _initialized(MQCNNStyle(prefix="mq_"))
        inputs = [rng.uniform(-1, 1, (3, 2, 7)).astype(np.float32), rng.uniform(-1, 1, (3, 7)).astype(np.float32)]
        _largest_differences(net, inputs, tmp_path / "mq.py")

    def test_wavenet_lstnet_losses(self, tmp_path):
        """Gluon's SoftmaxCrossEntropyLoss and L1Loss (mean with exclude=True) over a Conv1D + GRU."""
        rng = np.random.RandomState(0)
        net = _initialized(WaveNetLSTNetStyle(prefix="wn_"))
        inputs = [rng.uniform(-1, 1, (3, 2, 7)).astype(np.float32), rng.randint(0, 6, (3, 7)).astype(np.float32),
                  rng.uniform(-1, 1, (3, 7)).astype(np.float32)]
        _largest_differences(net, inputs, tmp_path / "wn.py", with_grad=[True, False, True])

    def test_deep_factor(self, tmp_path):
        """Two stacked NTC LSTMs and an Embedding read with an index past its last row (clipped, as MXNet does)."""
        rng = np.random.RandomState(0)
        net = _initialized(DeepFactorStyle(prefix="df_"))
        inputs = [np.array([0, 3, 7], np.float32), rng.uniform(-1, 1, (3, 5, 3)).astype(np.float32),
                  rng.uniform(-1, 1, (3, 5)).astype(np.float32)]
        _largest_differences(net, inputs, tmp_path / "df.py", with_grad=[False, True, True])


class PredictionStyle(gluon.HybridBlock):
    """GluonTS's prediction networks: distribution parameters from a Dense, then sample paths: Gaussian ones
    (DeepFactor, GaussianProcess: ``F.sample_normal(mu, sigma, shape=(S,))``) and Student-t ones (Transformer,
    DeepAR: a ``F.sample_gamma`` precision scaling a ``F.sample_normal`` draw)."""

    def __init__(self, paths, **kwargs):
        super().__init__(**kwargs)
        self.paths = paths
        with self.name_scope():
            self.proj = gluon.nn.Dense(3, flatten=False, in_units=2)

    def hybrid_forward(self, F, x):
        mu, sigma, nu = F.split(self.proj(x), 3, axis=2, squeeze_axis=True)  # (B, T) each
        sigma = F.Activation(sigma, act_type="softrelu") + 0.1
        nu = 4.0 + F.Activation(nu, act_type="softrelu")
        gaussian = F.sample_normal(mu, sigma, shape=(self.paths,))  # (B, T, S)
        precision = F.sample_gamma(nu / 2.0, 2.0 / (nu * F.square(sigma)), shape=(self.paths,))
        student = F.sample_normal(F.repeat(F.expand_dims(mu, 2), repeats=self.paths, axis=2), 1.0 / F.sqrt(precision))
        return mu, sigma, nu, gaussian, student


class TestPredictionNetwork:
    """Sample paths drawn by torch: the parameters as MXNet's, the paths' shapes and dtypes as MXNet's, and each
    side's 4000 paths per (series, step) centred on mu within 5 standard errors, Gaussian spread within 5% of
    sigma."""

    def test_gaussian_and_student_t_paths(self, tmp_path):
        """_sample_normal and _sample_gamma in a prediction network."""
        net = _initialized(PredictionStyle(4000, prefix="pred_"))
        x = np.random.RandomState(0).uniform(-1, 1, (2, 3, 2)).astype(np.float32)
        model = generate_torch(net, x.shape, tmp_path / "pred.py").eval()
        mx.random.seed(0)
        want = [o.asnumpy() for o in net(mx.nd.array(x))]
        torch.manual_seed(0)
        with torch.no_grad():
            got = [o.numpy() for o in model(torch.from_numpy(x))]
        for i in range(3):
            assert _largest_relative(want[i], got[i], f"parameter {i}") <= RTOL, f"parameter {i}"
        mu, sigma, nu = want[:3]
        spread = {"gaussian": sigma, "student": sigma * np.sqrt(nu / (nu - 2))}
        for side, outs in (("MXNet", want), ("torch", got)):
            for k, kind in ((3, "gaussian"), (4, "student")):
                assert outs[k].shape == want[k].shape == (2, 3, 4000) and outs[k].dtype == np.float32, (side, kind)
                error = np.abs(outs[k].mean(axis=2) - mu) / (spread[kind] / np.sqrt(4000))
                assert error.max() <= 5, f"{side} {kind}: a path mean {error.max():.2f} standard errors off mu"
            ratio = outs[3].std(axis=2) / sigma
            assert np.abs(ratio - 1).max() <= 0.05, f"{side}: Gaussian spread / sigma {ratio}"
