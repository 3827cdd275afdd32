"""Write converted weights to ``weights.safetensors`` one tensor at a time (issue 17), and read them back a block
at a time (``TensorFile``: each rank of a sharded model reads only its blocks).

``convert_weights`` builds the whole torch ``state_dict`` in memory; ``write_safetensors`` never holds more than
one converted tensor (plus the parts folded into it) beside the MXNet values: each tensor is converted, written to
a temporary data file and dropped; the header (names, dtypes, shapes, offsets) is then written before the data
into a second temporary file, which replaces the target only when complete. A failed write (disk full) leaves no
file behind and raises ``OutputWriteError`` naming the bytes needed.
"""
from __future__ import annotations

import errno
import json
import math
import os
import shutil
import tempfile

from mxformats.atomic import usual_mode
from migrate.errors import InputFileError, MappingError, OutputWriteError
from migrate.mapping.table import NameMapping
from migrate.mapping.weights import converted_tensors

__all__ = ["TensorFile", "write_safetensors", "write_state_dict", "read_safetensors"]

_DTYPES = {"torch.float32": "F32", "torch.float64": "F64", "torch.float16": "F16", "torch.bfloat16": "BF16",
           "torch.int64": "I64", "torch.int32": "I32", "torch.int16": "I16", "torch.int8": "I8",
           "torch.uint8": "U8", "torch.bool": "BOOL"}


def write_safetensors(mx_params, mapping: NameMapping, path, torch_model=None, *, progress=None) -> dict:
    """Convert ``mx_params`` by ``mapping`` and write them to the safetensors file ``path``, tensor by tensor.

    Args:
        mx_params, mapping, torch_model: as for ``convert_weights`` (same values, same keys, same dtypes).
        path: the output file; replaced atomically, never left half-written.
        progress: optional callable ``progress(n_bytes)`` called after each tensor is written.

    Returns:
        dict with ``tensors`` (count) and ``bytes`` (data bytes written).

    Raises:
        MappingError, WeightShapeError, InputFileError: as ``convert_weights``.
        OutputWriteError: the file could not be written (disk full: names the bytes needed); no file is left.

    Examples:
        >>> write_safetensors("net-0000.params", mapping, "out/weights.safetensors", torch_net)  # doctest: +SKIP
    """
    return _write_items(converted_tensors(mx_params, mapping, torch_model), path, progress)


def write_state_dict(state_dict: dict, path, *, progress=None) -> dict:
    """Write a torch ``state_dict`` to the safetensors file ``path`` one tensor at a time, atomically.

    Same file, guarantees and errors as ``write_safetensors``; no copy of the tensors is made (each is written
    from its own memory).

    Examples:
        >>> write_state_dict(model.state_dict(), "out/weights.safetensors")  # doctest: +SKIP
    """
    return _write_items(iter(state_dict.items()), path, progress)


def _write_items(items, path, progress) -> dict:
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    header: dict = {}
    offset = 0
    temps = []
    try:
        data_fd, data_path = tempfile.mkstemp(prefix=".weights-data-", dir=folder)
        temps.append(data_path)
        with os.fdopen(data_fd, "wb") as data:
            for key, tensor in items:
                dtype = _DTYPES.get(str(tensor.dtype))
                if dtype is None:
                    raise MappingError(f"torch key {key!r}: dtype {tensor.dtype} has no safetensors code; "
                                       f"write with format 'pt'")
                raw = _bytes(tensor)
                _write(data, raw, path, offset)
                header[key] = {"dtype": dtype, "shape": list(tensor.shape),
                               "data_offsets": [offset, offset + len(raw)]}
                offset += len(raw)
                del tensor, raw
                if progress is not None:
                    progress(offset)
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * (-len(blob) % 8)
        out_fd, out_path = tempfile.mkstemp(prefix=".weights-", dir=folder)
        temps.append(out_path)
        with os.fdopen(out_fd, "wb") as out, open(data_path, "rb") as data:
            _write(out, len(blob).to_bytes(8, "little") + blob, path, offset)
            while True:
                chunk = data.read(1 << 24)
                if not chunk:
                    break
                _write(out, chunk, path, offset)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(out_path, usual_mode())  # as every output: mkstemp made it 0600
        os.replace(out_path, path)
        temps.remove(out_path)
    finally:
        for temp in temps:
            try:
                os.remove(temp)
            except OSError:
                pass
    return {"tensors": len(header), "bytes": offset}


def _is_tensor(value) -> bool:
    import torch
    return isinstance(value, torch.Tensor)


def _bytes(tensor) -> memoryview:
    import torch
    flat = tensor.detach().contiguous().reshape(-1)
    if flat.dtype == torch.bfloat16:
        flat = flat.view(torch.int16)
    return memoryview(flat.numpy()).cast("B")


def _write(handle, raw, path, needed) -> None:
    try:
        handle.write(raw)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
            raise OutputWriteError(f"{path!r}: the disk filled while writing the weights (about {needed:,} bytes "
                                   f"of tensor data plus the same again for the temporary copy are needed, "
                                   f"{free:,} bytes free); free space or pass --out on another disk; no file "
                                   f"was written") from None
        raise OutputWriteError(f"{path!r}: could not write the weights ({exc.strerror}); check the folder's "
                               f"permissions; no file was written") from None


def read_safetensors(path) -> dict:
    """Read a safetensors file into a dict key -> ``torch.Tensor`` (``safetensors.torch.load_file``)."""
    from safetensors.torch import load_file
    return load_file(os.fspath(path))


REMAP_BYTES = 32 << 20
"""A ``TensorFile`` is mapped anew before a read would take the bytes read from one mapping past this."""


class TensorFile:
    """The named tensors of a file, read whole or one block at a time, never all at once.

    A safetensors file is opened with ``safe_open``; a ``torch.save`` file is loaded with ``torch.load(...,
    mmap=True)`` by ``load``. Either way the file is mapped into memory and a read touches only the pages of its block;
    those pages count in the process's RSS while the file stays mapped, so the file is mapped anew (the old mapping
    released) before a read that would take the bytes read since it was mapped past ``REMAP_BYTES``, and a block is
    read a piece of rows at a time: the file's pages held stay within ``REMAP_BYTES`` (one row, if a row is larger).
    Every read returns the block in memory of its own (or in ``out``): nothing returned keeps the file mapped.

    Args:
        path: The file (named in errors).
        load: A callable giving ``{key: tensor}`` of a ``torch.save`` file loaded memory-mapped (called again to map
            it anew); None: ``path`` is a safetensors file.

    Attributes:
        shapes: key -> shape of each tensor, in the file's order, from the header alone.

    Raises:
        InputFileError: the file is no safetensors file, or ``load`` gives something else than tensors.

    Examples:
        >>> weights = TensorFile("migrated/weights.safetensors")
        >>> weights.read("fc.weight", (slice(0, 2), slice(None))).shape  # rows 0 and 1 only  # doctest: +SKIP
        torch.Size([2, 512])
    """

    def __init__(self, path, load=None):
        self.path, self._load, self._source, self._mapped = os.fspath(path), load, None, 0
        self._reopen()
        if self._load is None:
            slices = {key: self._source.get_slice(key) for key in self._source.keys()}
            self.shapes = {key: tuple(piece.get_shape()) for key, piece in slices.items()}
            sizes = {key: _ITEMSIZE.get(piece.get_dtype(), 8) for key, piece in slices.items()}
        else:
            self.shapes = {key: tuple(value.shape) for key, value in self._source.items()}
            sizes = {key: value.element_size() for key, value in self._source.items()}
        self._row_bytes = {key: sizes[key] * math.prod(shape[1:]) for key, shape in self.shapes.items()}

    def _reopen(self) -> None:
        """Map the file anew (the previous mapping goes with the last reference to it)."""
        self._source, self._mapped = None, 0
        try:
            if self._load is None:
                from safetensors import safe_open
                self._source = safe_open(self.path, framework="pt")
                return
            self._source = self._load()
            odd = [f"{key} ({type(value).__name__})" for key, value in self._source.items() if not _is_tensor(value)]
        except Exception as exc:  # safetensors raises its own SafetensorError on foreign files
            raise InputFileError(f"{self.path!r}: expected a safetensors file or a torch.save file of a dict of "
                                 f"tensors, could not read it ({_first_line(exc)}); write it again with "
                                 f"`migrate all`") from None
        if odd:
            raise InputFileError(f"{self.path!r}: expected a dict of tensors, it holds {odd[:4]}; write it again with "
                                 f"`migrate all`")

    def __contains__(self, key) -> bool:
        return key in self.shapes

    def __iter__(self):
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)

    def _full(self, key, block: tuple) -> tuple:
        """``block`` with a slice for every dimension of ``key``."""
        return tuple(block) + (slice(None),) * (len(self.shapes[key]) - len(block))

    def _pieces(self, key, block: tuple) -> list:
        """``block`` of ``key`` cut along its first dimension into pieces of at most ``REMAP_BYTES`` (one row at
        least): ``(slices, first row in the block, rows, bytes)``."""
        shape, full = self.shapes[key], self._full(key, block)
        if not shape:
            return [((), 0, 1, self._row_bytes[key])]
        rows = range(shape[0])[full[0]]
        step = max(1, REMAP_BYTES // max(self._row_bytes[key], 1))
        return [((slice(rows.start + at, rows.start + min(at + step, len(rows))),) + full[1:], at,
                 min(step, len(rows) - at), min(step, len(rows) - at) * self._row_bytes[key])
                for at in range(0, len(rows), step)] or [(full, 0, 0, 0)]

    def _view(self, key, piece: tuple, nbytes: int):
        """``piece`` of ``key`` as a view of the mapped file, mapped anew first when the bytes read would pass
        ``REMAP_BYTES``."""
        if self._mapped and self._mapped + nbytes > REMAP_BYTES:
            self._reopen()
        self._mapped += nbytes
        if self._load is None:
            return self._source.get_slice(key)[piece if piece else ...]
        return self._source[key][piece]

    def read(self, key, block: tuple = (), out=None):
        """The tensor ``key``, or its ``block``, in memory of its own; read a piece of at most ``REMAP_BYTES`` at a
        time (the file mapped anew between pieces), so that the file's pages held stay below that.

        Args:
            key: The tensor's name.
            block: One slice per dimension (step 1), or ``()`` for the whole.
            out: A tensor of the block's shape to copy it into (cast to its dtype); None: a new tensor.

        Returns:
            ``out``, or a new tensor.

        Raises:
            InputFileError: the file's bytes for ``key`` cannot be read (the file changed or is cut short).
        """
        try:
            for piece, at, rows, nbytes in self._pieces(key, block):
                view = self._view(key, piece, nbytes)
                if out is None:
                    out = view.new_empty([len(range(n)[s]) for n, s in zip(self.shapes[key], self._full(key, block))])
                (out[at:at + rows] if out.dim() else out).copy_(view)
            return out
        except Exception as exc:  # a file cut short or replaced since it was opened
            raise InputFileError(f"{self.path!r}: cannot read {key!r} ({_first_line(exc)}); write it again with "
                                 f"`migrate all`") from None


def _first_line(exc) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


_ITEMSIZE = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
             "I8": 1, "U8": 1, "BOOL": 1}
"""Bytes per element of each safetensors dtype code."""
