"""MXNet's per-array C calls of an update step, over many arrays in one compiled loop (numba).

A step asks MXNet, for every array of the step, for its address (``MXNDArrayGetData``) and reads and clears its
gradient's freshness flag (``MXNDArrayGetGradState``/``MXNDArraySetGradState``, what Gluon's ``_fresh_grad``
property calls): on resnet50_v1 under SGD-momentum, 579 addresses and 193 flags read and cleared. Through ctypes,
most of each call's cost is Python's (argument conversion, ``byref``, the property). These loops make the same
calls, in the same order, from machine code: the same C function on the same handles, so the same answers (a weight
that MKLDNN reordered is brought back to the default layout by ``MXNDArrayGetData`` itself;
``tests/gluon_lr/fused/test_fused_plan.py::TestArrayCalls`` compares them with the ctypes calls).

Each loop gets the C function's address as an argument (the machine code cached on disk holds no address of this
process) and releases the GIL, as ctypes does around each call: ``MXNDArrayGetData`` may wait on MXNet's engine.
Imported with ``mxupdate.kernels`` (``compiled.load_kernels``), so ``import gluon_lr`` does not import numba.
"""
import ctypes

import numba
import numpy as np
from llvmlite import ir
from mxnet.base import _LIB, check_call
from numba import types
from numba.extending import intrinsic

_JIT = {"nogil": True, "error_model": "numpy", "boundscheck": False}


def _jit(function):
    """``numba.njit`` with the on-disk cache where numba finds a writable cache directory (as ``mxupdate.kernels._jit``)."""
    try:
        return numba.njit(cache=True, **_JIT)(function)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available for file ..."
        return numba.njit(**_JIT)(function)


def _address_of(function) -> int:
    """The address of a ctypes function of libmxnet."""
    return ctypes.cast(function, ctypes.c_void_p).value


_GET_DATA = _address_of(_LIB.MXNDArrayGetData)
_GET_GRAD_STATE = _address_of(_LIB.MXNDArrayGetGradState)
_SET_GRAD_STATE = _address_of(_LIB.MXNDArraySetGradState)


@intrinsic
def _call_with_pointer(typingctx, function, handle, pointer):
    """``int function(void *handle, void *pointer)`` called at the integer address ``function``."""
    signature = types.int32(types.int64, types.int64, types.int64)

    def codegen(context, builder, sig, args):
        void_p = ir.IntType(8).as_pointer()
        callee = builder.inttoptr(args[0], ir.FunctionType(ir.IntType(32), [void_p, void_p]).as_pointer())
        return builder.call(callee, [builder.inttoptr(args[1], void_p), builder.inttoptr(args[2], void_p)])
    return signature, codegen


@intrinsic
def _call_with_int(typingctx, function, handle, value):
    """``int function(void *handle, int value)`` called at the integer address ``function``."""
    signature = types.int32(types.int64, types.int64, types.int32)

    def codegen(context, builder, sig, args):
        void_p = ir.IntType(8).as_pointer()
        callee = builder.inttoptr(args[0], ir.FunctionType(ir.IntType(32), [void_p, ir.IntType(32)]).as_pointer())
        return builder.call(callee, [builder.inttoptr(args[1], void_p), args[2]])
    return signature, codegen


@_jit
def _each_with_pointer(function, handles, out_address, stride):
    """``function(handles[i], out_address + i * stride)`` for each i in order; the first failing i, or -1."""
    for i in range(handles.size):
        if _call_with_pointer(function, handles[i], out_address + i * stride) != 0:
            return i
    return -1


@_jit
def _each_with_int(function, handles, value):
    """``function(handles[i], value)`` for each i in order; the first failing i, or -1."""
    for i in range(handles.size):
        if _call_with_int(function, handles[i], value) != 0:
            return i
    return -1


def _checked(failed: int) -> None:
    """Raise MXNet's own error (``check_call``) if a loop stopped at a failing call."""
    if failed >= 0:
        check_call(-1)


def data_pointers(handles: np.ndarray, out: np.ndarray) -> None:
    """``out[i]`` = ``MXNDArrayGetData(handles[i])``: each array's address in MXNet's default layout (see
    ``base.data_pointers``); ``handles`` and ``out`` are int64 arrays of one size, ``out`` C-contiguous.

    Example:
        >>> data_pointers(np.array([a.handle.value for a in arrays], np.int64), out)
    """
    _checked(_each_with_pointer(np.int64(_GET_DATA), handles, np.int64(out.ctypes.data), np.int64(8)))


def grad_states(handles: np.ndarray) -> np.ndarray:
    """Each array's gradient freshness (``NDArray._fresh_grad``: 1 when backward wrote it since it was cleared).

    Example:
        >>> grad_states(np.array([a.handle.value for a in arrays], np.int64))   # array([1, 1, 0], dtype=int32)
    """
    out = np.zeros(handles.size, np.int32)
    _checked(_each_with_pointer(np.int64(_GET_GRAD_STATE), handles, np.int64(out.ctypes.data), np.int64(4)))
    return out


def clear_grad_states(handles: np.ndarray) -> None:
    """Mark each array's gradient as used (``NDArray._fresh_grad = False``).

    Example:
        >>> clear_grad_states(np.array([a.handle.value for a in arrays], np.int64))
    """
    _checked(_each_with_int(np.int64(_SET_GRAD_STATE), handles, np.int32(0)))
