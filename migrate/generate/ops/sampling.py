"""MXNet's ``_sample_*`` ops: draws from distributions whose parameters are arrays (``_sample_normal``,
``_sample_uniform``, ``_sample_gamma``, ``_sample_exponential``, ``_sample_poisson``, ``_sample_negative_binomial``,
``_sample_generalized_negative_binomial``, ``_sample_multinomial``) and ``_sample_unique_zipfian`` (distinct classes
drawn from MXNet's approximately log-uniform distribution, with the number of draws it took).

Each parameter element gets ``shape`` draws: the output's shape is the parameters' shape followed by ``shape``, its
dtype the node's ``dtype`` (float32 by default, whatever the parameters' dtype, as MXNet gives it). The draws come
from torch's generator (never MXNet's numbers: the same distributions, shapes and dtypes; computed from float64
parameters) and, as in MXNet, no gradient reaches the parameters (except through ``_sample_multinomial``'s
log-probabilities). MXNet's parameterizations: gamma's ``beta`` is its scale; ``negative_binomial`` counts the
failures before ``k`` successes of probability ``p``; ``generalized_negative_binomial`` is Poisson(lambda) with
lambda ~ Gamma(1 / alpha, scale alpha mu), Poisson(mu) where alpha = 0.
"""
from __future__ import annotations

import math

import torch

from migrate.generate.registry import OpNode, register

__all__ = ["mx_sample_params", "mx_sample_normal", "mx_sample_uniform", "mx_sample_gamma", "mx_sample_exponential",
           "mx_sample_poisson", "mx_sample_negative_binomial", "mx_sample_generalized_negative_binomial",
           "mx_sample_multinomial", "mx_sample_unique_zipfian"]


@register("_sample_normal", "_sample_uniform", "_sample_gamma", "_sample_exponential", "_sample_poisson",
          "_sample_negative_binomial", "_sample_generalized_negative_binomial")
def _sample(node: OpNode) -> str:
    helper = _HELPERS[node.op]
    return node.call(helper, *node.inputs, node.tuple_attr("shape"), node.torch_dtype())


def mx_sample_params(params, shape):
    """The parameter arrays detached (no gradient reaches them, as in MXNet), in float64, each element repeated
    for its ``shape`` draws: shape ``params[0].shape + shape``."""
    out_shape = tuple(params[0].shape) + tuple(shape)
    return [p.detach().double().reshape(tuple(p.shape) + (1,) * len(shape)).expand(out_shape) for p in params]


def mx_sample_normal(mu, sigma, shape, dtype):
    """MXNet's sample_normal: ``shape`` draws of N(mu, sigma^2) per element."""
    mu, sigma = mx_sample_params((mu, sigma), shape)
    return torch.normal(mu, sigma).to(dtype)


def mx_sample_uniform(low, high, shape, dtype):
    """MXNet's sample_uniform: ``shape`` draws in [low, high) per element."""
    low, high = mx_sample_params((low, high), shape)
    return (low + (high - low) * torch.rand_like(low)).to(dtype)


def mx_sample_gamma(alpha, beta, shape, dtype):
    """MXNet's sample_gamma: shape ``alpha``, scale ``beta`` (mean alpha beta)."""
    alpha, beta = mx_sample_params((alpha, beta), shape)
    return torch.distributions.Gamma(alpha, 1.0 / beta).sample().to(dtype)


def mx_sample_exponential(lam, shape, dtype):
    """MXNet's sample_exponential: rate ``lam`` (mean 1 / lam)."""
    lam, = mx_sample_params((lam,), shape)
    return torch.distributions.Exponential(lam).sample().to(dtype)


def mx_sample_poisson(lam, shape, dtype):
    """MXNet's sample_poisson: counts of mean ``lam``."""
    lam, = mx_sample_params((lam,), shape)
    return torch.poisson(lam).to(dtype)


def mx_sample_negative_binomial(k, p, shape, dtype):
    """MXNet's sample_negative_binomial: the failures before ``k`` successes of probability ``p`` (torch's
    NegativeBinomial counts the draws of probability 1 - p before ``k`` others)."""
    k, p = mx_sample_params((k, p), shape)
    return torch.distributions.NegativeBinomial(k, probs=1.0 - p).sample().to(dtype)


def mx_sample_generalized_negative_binomial(mu, alpha, shape, dtype):
    """MXNet's sample_generalized_negative_binomial: Poisson(lambda), lambda ~ Gamma(1 / alpha, scale alpha mu)
    (mean mu, variance mu + alpha mu^2); Poisson(mu) where alpha = 0."""
    mu, alpha = mx_sample_params((mu, alpha), shape)
    spread = alpha > 0
    safe = torch.where(spread, alpha, torch.ones_like(alpha))
    rate = torch.distributions.Gamma(1.0 / safe, 1.0 / (safe * mu)).sample()
    return torch.poisson(torch.where(spread, rate, mu)).to(dtype)


_HELPERS = {"_sample_normal": mx_sample_normal, "_sample_uniform": mx_sample_uniform, "_sample_gamma": mx_sample_gamma,
            "_sample_exponential": mx_sample_exponential, "_sample_poisson": mx_sample_poisson,
            "_sample_negative_binomial": mx_sample_negative_binomial,
            "_sample_generalized_negative_binomial": mx_sample_generalized_negative_binomial}


@register("_sample_multinomial")
def _sample_multinomial(node: OpNode) -> str:
    return node.call(mx_sample_multinomial, node.inputs[0], node.tuple_attr("shape"),
                     bool(node.attr("get_prob", False)), node.torch_dtype("int32"))


def mx_sample_multinomial(data, shape, get_prob, dtype):
    """MXNet's sample_multinomial: per distribution (the last axis of ``data``, read unnormalized) ``shape`` draws
    (one where ``shape`` is empty), each the first class whose running sum of probabilities (float32) reaches a
    uniform float32 draw in [0, 1); a row summing short of the draw gives index K, as MXNet's kernel does. With
    ``get_prob`` also the log-probability of each draw (in ``data``'s dtype; its gradient is head / p at the drawn
    class, MXNet's backward). A 1-D ``data`` with an empty ``shape`` gives shape (1,)."""
    k = data.shape[-1]
    rows = data.reshape(-1, k)
    draws = math.prod(shape)
    cumulative = torch.cumsum(rows.detach().double(), 1).float()
    uniform = torch.rand(rows.shape[0], draws, dtype=torch.float32, device=data.device)
    index = torch.searchsorted(cumulative.contiguous(), uniform)
    out_shape = (tuple(shape) or (1,)) if data.dim() == 1 else tuple(data.shape[:-1]) + tuple(shape)
    sample = index.reshape(out_shape).to(dtype)
    if not get_prob:
        return sample
    return sample, torch.log(rows.gather(1, index.clamp(max=k - 1))).reshape(out_shape)


@register("_sample_unique_zipfian")
def _sample_unique_zipfian(node: OpNode) -> str:
    shape = node.tuple_attr("shape") or (tuple(node.out_shape) if node.out_shape else ())
    if len(shape) != 2:
        raise node.unsupported(f"shape {shape} (MXNet takes (batch_size, num_sampled))")
    range_max = int(node.attr("range_max"))
    if shape[1] > range_max:
        raise node.unsupported(f"num_sampled {shape[1]} above range_max {range_max} (MXNet refuses it)")
    return node.call(mx_sample_unique_zipfian, range_max, shape, "self._device()")


def mx_sample_unique_zipfian(range_max, shape, device=None):
    """MXNet's _sample_unique_zipfian: per row of ``shape`` (batch_size, num_sampled), draws
    ``lround(exp(u * log(range_max))) - 1`` (u uniform in [0, 1), float64) until ``num_sampled`` distinct classes
    came up, kept in the order they first came: P(k) = (log(min(k + 1.5, range_max)) - log(max(k + 0.5, 1))) /
    log(range_max), as MXNet's kernel draws (its documentation's (log(k + 2) - log(k + 1)) / log(range_max + 1) is
    another distribution). Returns (samples int64 (batch_size, num_sampled), draws per row int64 (batch_size,)): the
    draws count the repeated classes too, as MXNet's ``num_tries``."""
    rows, wanted = int(shape[0]), int(shape[1])
    if rows == 0 or wanted == 0:
        return (torch.empty((rows, wanted), dtype=torch.int64, device=device),
                torch.zeros(rows, dtype=torch.int64, device=device))
    log_range = math.log(range_max)
    draws = torch.empty((rows, 0), dtype=torch.int64, device=device)
    chunk = 2 * wanted + 16
    while True:
        more = torch.exp(torch.rand((rows, chunk), dtype=torch.float64, device=device) * log_range)
        whole = more.trunc()
        draws = torch.cat([draws, (whole + (more - whole >= 0.5).double()).long() - 1], 1)  # lround, then - 1
        order, index = torch.sort(draws, dim=1, stable=True)
        first = torch.ones_like(order, dtype=torch.bool)
        first[:, 1:] = order[:, 1:] != order[:, :-1]
        new = torch.zeros_like(first).scatter(1, index, first)  # a class's first draw in its row
        count = new.cumsum(1)
        if bool((count[:, -1] >= wanted).all()):
            break
        chunk *= 2
    keep = new & (count <= wanted)
    tries = (count >= wanted).int().argmax(1) + 1  # the draw that brought the last class
    return draws[keep].reshape(rows, wanted), tries.long()
