"""The bounds a states pickle is held to, so that a hostile file of a few bytes can neither exhaust the memory nor
crash or hang the reader; ``safe_pickle.safe_loads`` applies all three:

- before loading, ``nesting_offset``: containers nested deeper than ``MAX_NESTING`` are refused from the opcodes
  alone (hashing a dict key nested a million tuples deep overflows CPython 3.11's C stack: the process would die; a
  list nested a million deep costs 70 MB and seconds to build from a 2 MB file);
- while loading, ``Allocations``: what an admitted class is asked to allocate never passes the pickle's own size
  (a 30-byte file calling ``bytearray(4 * 10**9)``), and numpy object arrays are refused;
- after loading, ``nesting_problem``: containers and objects nested deeper than ``MAX_NESTING``, or holding
  themselves, are named; each object is walked once, iteratively, so what reads the states afterwards never recurses
  without bound.

MXNet's own states nest 4 deep (a multi_precision state in the states dict in the ``(states, optimizer)`` tuple).
"""
import math
import pickletools

import numpy as np

from .errors import UnsafeStatesError

__all__ = ["MAX_NESTING", "Allocations", "nesting_offset", "nesting_problem"]

MAX_NESTING = 32
_BUILDERS = ("TUPLE", "EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "LIST", "EMPTY_LIST", "DICT", "EMPTY_DICT",
             "EMPTY_SET", "FROZENSET")  # make a container of the items they take
_FILLERS = ("APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS")  # put items into the container below them
_GETS = ("GET", "BINGET", "LONG_BINGET")
_PUTS = ("PUT", "BINPUT", "LONG_BINPUT")


def nesting_offset(data: bytes):
    """The byte offset of the opcode that nests a container deeper than ``MAX_NESTING``, or None, read from the
    opcodes (``pickletools.genops``, nothing run) with a stack of container depths, the memo followed. A container
    filled after it was memoized can be deeper than its memo says: ``nesting_problem`` checks the loaded objects.
    A malformed pickle ends the scan (the unpickler then names what is wrong).

    Examples:
        >>> nesting_offset(pickle.dumps((((1,),),)))
        >>> nesting_offset(b"K\\x00" + b"\\x85" * 40 + b".")
        34
    """
    stack, memo = [], {}  # container depth of each stack entry (0: no container); None marks a MARK
    try:
        for op, arg, position in pickletools.genops(data):
            if op.name == "MARK":
                stack.append(None)
            elif op.name in _GETS:
                stack.append(memo.get(arg, 0))
            elif op.name in _PUTS or op.name == "MEMOIZE":
                memo[arg if op.name in _PUTS else len(memo)] = stack[-1]
            elif op.name == "DUP":
                stack.append(stack[-1])
            elif _nested_too_deep(stack, op):
                return position
    except (ValueError, IndexError, TypeError):  # cut short, unknown opcode, or a stack the opcodes do not fit
        return None
    return None


def _nested_too_deep(stack: list, op) -> bool:
    """Apply ``op`` to the stack of container depths; True when it nests a container deeper than ``MAX_NESTING``."""
    popped = _pop(stack, op)
    if op.name in _BUILDERS:
        depth = 1 + max(popped, default=0)
    elif op.name in _FILLERS:
        depth = max(popped[0], 1 + max(popped[1:], default=0))
    else:
        depth = popped[0] if op.name == "BUILD" else 0  # BUILD leaves its object; anything else makes no container
        stack += [depth] * len(op.stack_after)
        return False
    stack.append(depth)
    return depth > MAX_NESTING


def _pop(stack: list, op) -> list:
    """Pop what ``op`` consumes: its items down to the MARK (and the MARK) when it takes a mark, then the rest."""
    before = op.stack_before
    popped = []
    if pickletools.markobject in before:
        while stack[-1] is not None:
            popped.append(stack.pop())
        stack.pop()
        count = before.index(pickletools.markobject)
    else:
        count = len(before)
    for _ in range(count):
        if stack[-1] is None:
            raise ValueError("a MARK where an operand belongs")
        popped.insert(0, stack.pop())
    return popped


class Allocations:
    """The admitted callables that allocate, bounded by the pickle's size: ``bytearray`` of a count, numpy arrays by
    shape (``_reconstruct``, ``ndarray``), numpy dtypes (object dtypes refused: MXNet's states never hold one).

    Args:
        size: The pickle's length in bytes: no allocation may pass it (every legitimate array's bytes are in it).
        source: How messages name the file.

    Examples:
        >>> Allocations(30, "s.states").bytearray(4 * 10 ** 9)  # doctest: +SKIP
        Traceback (most recent call last):
        UnsafeStatesError: States file 's.states' asks for a bytearray of 4,000,000,000 bytes ...
    """

    def __init__(self, size: int, source: str):
        self.size, self.source = size, source
        self.ndarray_type = self._ndarray_type()

    def refuse(self, what: str) -> UnsafeStatesError:
        return UnsafeStatesError(f"States file {self.source!r} asks for {what}, more than its {self.size:,} bytes "
                                 f"hold; it was refused before allocating (MXNet writes every array's bytes into the "
                                 f"file): the file is damaged or crafted, save the states again.")

    def bytearray(self, *args) -> bytearray:
        """``bytearray(*args)``; a count above the pickle's size refused (MXNet pickles an array's bytes, not a
        count)."""
        if args and isinstance(args[0], int) and args[0] > self.size:
            raise self.refuse(f"a bytearray of {args[0]:,} bytes")
        return bytearray(*args)

    def check_array(self, shape, dtype) -> None:
        """UnsafeStatesError for an object dtype, or an array of ``shape`` x ``dtype`` larger than the pickle."""
        dtype = np.dtype(dtype)
        if dtype.hasobject:
            raise UnsafeStatesError(f"States file {self.source!r} holds a numpy array of Python objects, which "
                                    f"optimizer states never hold; it was refused unread (loading it could run code).")
        dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        if all(isinstance(d, int) for d in dims) and math.prod(dims) * dtype.itemsize > self.size:
            raise self.refuse(f"a numpy array of shape {dims} x {dtype.name}")

    def reconstruct(self, original):
        """numpy's ``_reconstruct(subtype, shape, dtype)``, checked first (``subtype`` may be ``ndarray_type``)."""
        def _reconstruct(subtype, shape, dtype):
            self.check_array(shape, dtype)
            return original(np.ndarray if subtype is self.ndarray_type else subtype, shape, dtype)
        return _reconstruct

    def _ndarray_type(self) -> type:
        """What the pickle gets for ``numpy.ndarray`` (``ndarray_type``): a class, as ``_reconstruct`` takes it for
        its subtype, whose call makes a checked plain ``numpy.ndarray``."""
        allocations = self

        class ndarray:  # noqa: N801 (numpy's name, in messages)
            def __new__(cls, shape, dtype=float, *args, **kwargs):
                allocations.check_array(shape, dtype)
                return np.ndarray(shape, dtype, *args, **kwargs)
        return ndarray

    def dtype(self, *args) -> np.dtype:
        """``numpy.dtype(*args)``; an object dtype refused."""
        found = np.dtype(*args)
        if found.hasobject:
            self.check_array((), found)
        return found


def nesting_problem(loaded):
    """What makes ``loaded`` (an unpickled states file) nest beyond what any states file does, or ``""``: containers
    (tuples, lists, dicts, sets) and objects' attributes nested deeper than ``MAX_NESTING``, or a container that holds
    itself. Each object is walked once, iteratively, in the order a recursive reader meets them: such a reader then
    recurses at most ``MAX_NESTING`` deep.

    Examples:
        >>> nesting_problem({0: (np.zeros(2), np.ones(2))})
        ''
    """
    done, open_, todo = set(), set(), [(loaded, 0, False)]
    while todo:
        value, depth, leaving = todo.pop()
        if leaving:
            open_.discard(id(value))
            done.add(id(value))
            continue
        children = _children(value)
        if not children or id(value) in done:
            continue
        if id(value) in open_:
            return f"a {type(value).__name__} holds itself"
        if depth >= MAX_NESTING:
            return f"containers nest more than {MAX_NESTING} deep"
        open_.add(id(value))
        todo.append((value, depth, True))
        todo.extend((child, depth + 1, False) for child in reversed(children))
    return ""


def _children(value) -> list:
    """The objects ``value`` holds: a container's items (a dict's keys and values), an object's attributes."""
    if isinstance(value, dict):
        return [item for pair in value.items() for item in pair]
    if isinstance(value, (tuple, list, set, frozenset)):
        return list(value)
    attributes = getattr(value, "__dict__", None)
    return list(attributes.values()) if isinstance(attributes, dict) and not isinstance(value, type) else []
