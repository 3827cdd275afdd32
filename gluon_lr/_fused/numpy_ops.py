"""Back-end: numpy in cache-sized chunks for float32 sgd-momentum and adam on CPU (where numba is missing)."""
import numpy as np
from mxnet import optimizer as mxopt

from .base import clip_of, numpy_at, param_float32
from .table import Table
from mxupdate.threads import pool, split_segments, thread_count


#: Elements per numpy chunk: six float32 arrays of this length stay in a 2 MiB L2 cache.
_CHUNK = 1 << 15


def _adam_consts(optimizer) -> tuple:
    """Adam's float32 constants, as ``AdamUpdateKernel`` receives them."""
    f32 = param_float32
    beta1, beta2 = f32(optimizer.beta1), f32(optimizer.beta2)
    return (beta1, beta2, np.float32(1) - beta1, np.float32(1) - beta2, f32(optimizer.epsilon),
            f32(optimizer.rescale_grad), clip_of(optimizer))


def _adam_chunk(arrays, lr, wd, consts, tmp) -> None:
    """Adam on one cache-sized chunk: the operations and float32 rounding of MXNet's ``AdamUpdateKernel``."""
    beta1, beta2, one_b1, one_b2, eps, rescale, clip = consts
    (w, g, m, v), (x, y) = arrays, tmp
    np.multiply(g, rescale, out=x)
    np.multiply(w, wd, out=y)
    x += y
    if clip is not None:  # MXNet's clip::Map; np.clip is several times slower
        np.minimum(x, clip, out=x)
        np.maximum(x, -clip, out=x)
    m *= beta1
    np.multiply(x, one_b1, out=y)
    m += y
    v *= beta2
    np.multiply(x, one_b2, out=y)
    y *= x
    v += y
    np.sqrt(v, out=y)
    y += eps
    np.multiply(m, lr, out=x)
    x /= y
    w -= x


def _sgd_mom_consts(optimizer) -> tuple:
    """SGD-momentum's float32 constants, as ``SGDMomKernel`` receives them."""
    return param_float32(optimizer.momentum), param_float32(optimizer.rescale_grad), clip_of(optimizer)


def _sgd_mom_chunk(arrays, lr, wd, consts, tmp) -> None:
    """SGD-momentum on one chunk: the operations and float32 rounding of MXNet's ``SGDMomKernel``."""
    momentum, rescale, clip = consts
    (w, g, m), (x, _) = arrays, tmp
    m *= momentum
    np.multiply(w, lr * wd, out=x)
    m -= x
    if clip is None:
        np.multiply(g, lr * rescale, out=x)
    else:
        np.multiply(g, rescale, out=x)
        np.minimum(x, clip, out=x)
        np.maximum(x, -clip, out=x)
        x *= lr
    m -= x
    w += m


def _chunks(chunk_fn, consts, work) -> None:
    """Run ``chunk_fn`` over ``work`` [(arrays, lr, wd, start, stop)] in chunks of ``_CHUNK`` elements."""
    tmp = (np.empty(_CHUNK, np.float32), np.empty(_CHUNK, np.float32))
    for arrays, lr, wd, start, stop in work:
        for s in range(start, stop, _CHUNK):
            e = min(s + _CHUNK, stop)
            chunk_fn([a[s:e] for a in arrays], lr, wd, consts, (tmp[0][:e - s], tmp[1][:e - s]))


def numpy_update(chunk_fn, consts, segments: list) -> None:
    """Run ``chunk_fn`` over ``segments`` with one thread per core (numpy releases the GIL in its loops)."""
    parts = split_segments(segments, thread_count())
    if len(parts) == 1:
        return _chunks(chunk_fn, consts, parts[0])
    for future in [pool(len(parts)).submit(_chunks, chunk_fn, consts, part) for part in parts]:
        future.result()


#: numpy implementations: optimizer class -> (constants, chunk kernel, number of state slots it needs, lr/wd as the
#: stock operator gets them: ``multi_sgd_mom_update``'s tuples correctly rounded, ``adam_update``'s scalars by dmlc).
NUMPY_KERNELS = {mxopt.SGD: (_sgd_mom_consts, _sgd_mom_chunk, 1, np.float32),
                 mxopt.Adam: (_adam_consts, _adam_chunk, 2, param_float32)}


def numpy_applies(optimizer, table: Table) -> bool:
    """Whether a numpy implementation exists for this optimizer and table (float32 on CPU, no master copy)."""
    spec = NUMPY_KERNELS.get(type(optimizer))
    if spec is None or table.ctx.device_type != "cpu" or table.dtype != np.float32 or table.slot_count != spec[2]:
        return False
    return type(optimizer) is not mxopt.SGD or optimizer.momentum > 0


def numpy_table_update(optimizer, table: Table, calls=None) -> None:
    """Update every tensor of ``table`` (after ``numpy_applies`` and ``base.wait_all``) with the numpy
    implementation; ``calls``: the ``base.ArrayCalls`` that asks MXNet for the addresses (ctypes if None)."""
    consts, chunk_fn, _, f = NUMPY_KERNELS[type(optimizer)]
    addresses, lengths = table.addresses(calls)
    segments = [([numpy_at(address, n, table.dtype) for address in row], f(t.lr), f(t.wd))
                for row, n, t in zip(addresses.tolist(), lengths.tolist(), table.tensors) if n]
    if segments:
        numpy_update(chunk_fn, consts(optimizer), segments)
