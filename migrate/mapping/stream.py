"""Write converted weights to ``weights.safetensors`` one tensor at a time (issue 17).

``convert_weights`` builds the whole torch ``state_dict`` in memory; ``write_safetensors`` never holds more than
one converted tensor (plus the parts folded into it) beside the MXNet values: each tensor is converted, written to
a temporary data file and dropped; the header (names, dtypes, shapes, offsets) is then written before the data
into a second temporary file, which replaces the target only when complete. A failed write (disk full) leaves no
file behind and raises ``OutputWriteError`` naming the bytes needed.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile

from mxformats.atomic import usual_mode
from migrate.errors import MappingError, OutputWriteError
from migrate.mapping.table import NameMapping
from migrate.mapping.weights import converted_tensors

__all__ = ["write_safetensors", "write_state_dict", "read_safetensors"]

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
