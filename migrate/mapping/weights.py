"""Copy MXNet parameter values into a torch ``state_dict`` by a ``NameMapping``."""
from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from mxformats.errors import MXNetFileError
from mxformats.ndarray import NDArrayFile, index_ndarrays

from migrate import arguments
from migrate.errors import InputFileError, MappingError, WeightShapeError
from migrate.mapping.table import NameMapping

__all__ = ["convert_weights", "load_mxnet_weights"]


def convert_weights(mx_params, mapping: NameMapping, torch_model=None) -> dict:
    """Return a torch ``state_dict`` holding the MXNet values, each under its mapped key and in torch's layout.

    Args:
        mx_params: dict name -> ``mx.nd.NDArray`` or ``np.ndarray``, or the path of a ``.params`` file (read
            without MXNet, one array at a time; ``arg:``/``aux:`` prefixes are removed).
        mapping: the ``NameMapping`` from ``name_mapping``.
        torch_model: optional; when given, tensors take its dtypes, shapes are checked against its
            ``state_dict``, and keys in ``mapping.torch_defaults`` are filled (zero bias, counters kept).

    Returns:
        dict torch key -> ``torch.Tensor``; load it with ``torch_model.load_state_dict(sd, strict=False)`` or,
        with ``torch_model`` given and ``mapping.ok``, strictly.

    Raises:
        InputFileError: the params file is missing, not an MXNet params file, damaged (names the byte offset) or
            holds sparse arrays (names them).
        MappingError: MXNet parameters named by the mapping are missing from ``mx_params`` (lists them).
        WeightShapeError: a value does not fit its torch target (names both sides and both shapes).

    Note:
        An MXNet conv bias with no torch bias is folded into the next BatchNorm's running mean
        (``mean - bias``): exact in eval mode; under batch statistics the bias cancels anyway.

    Examples:
        >>> sd = convert_weights("net-0000.params", mapping, torch_net)  # doctest: +SKIP
        >>> torch_net.load_state_dict(sd)
    """
    arguments.name_table(mapping, "convert_weights(mapping)")  # a str would be read as the names 'a', 'b', ...
    if torch_model is not None:
        arguments.torch_model(torch_model, "convert_weights(torch_model)")
    return dict(converted_tensors(mx_params, mapping, torch_model))


def converted_keys(mapping: NameMapping, torch_model) -> list:
    """The torch keys ``converted_tensors`` yields for ``torch_model``: mapped keys, then defaults it fills.

    Examples:
        >>> len(converted_keys(mapping, torch_net)) == len(torch_net.state_dict())  # doctest: +SKIP
        True
    """
    mapped = list(dict.fromkeys(mapping[name] for name in mapping))
    target = torch_model.state_dict()
    return mapped + [key for key in mapping.torch_defaults if key in target and key not in set(mapped)]


def load_mxnet_weights(torch_model, mx_params, mapping: NameMapping, *, progress=None) -> list:
    """Copy the MXNet values into ``torch_model``'s own tensors, one tensor at a time (never a second copy of the
    model), as ``load_state_dict(convert_weights(...), strict=False)`` would; return the keys written.
    ``progress(1)``, when given, is called after each tensor.

    Raises:
        The errors of ``convert_weights``.

    Examples:
        >>> keys = load_mxnet_weights(torch_net, "net-0000.params", mapping)  # doctest: +SKIP
    """
    import torch
    state = torch_model.state_dict()
    written = []
    with torch.no_grad():
        for key, tensor in converted_tensors(mx_params, mapping, torch_model):
            if key in state:
                state[key].copy_(tensor)
                written.append(key)
            if progress is not None:
                progress(1)
    return written


def converted_tensors(mx_params, mapping: NameMapping, torch_model=None):
    """Yield ``(torch key, tensor)`` one key at a time, as ``convert_weights`` returns them (folded parts summed
    into their key, dtypes of ``torch_model``): what ``stream.write_safetensors`` writes tensor by tensor.

    Each MXNet value is read when its key is converted (from a ``.params`` file: that one array, without MXNet) and
    becomes the tensor itself where its layout and dtype already fit: beside the tensors already yielded, at most one
    tensor's values (and its layout or dtype conversion) is held at a time.

    Examples:
        >>> for key, tensor in converted_tensors("net-0000.params", mapping, torch_net): ...  # doctest: +SKIP
    """
    import torch
    values = _read_params(mx_params)
    missing = [k for k in mapping if k not in values]
    if missing:
        raise MappingError(f"mx_params: the mapping needs {len(missing)} MXNet parameter(s) not given: "
                           f"{missing[:8]}{' ...' if len(missing) > 8 else ''}; pass the params of the model "
                           f"the mapping was built from")
    target = torch_model.state_dict() if torch_model is not None else {}
    by_key: dict = {}
    for name in sorted(mapping, key=lambda k: mapping.entry(k).get("fold", False)):
        by_key.setdefault(mapping[name], []).append(name)
    for key, names in by_key.items():
        tensor = None
        for name in names:
            part = _torch_part(values, name, mapping, target.get(key), key)
            tensor = part if tensor is None else tensor + part
        yield key, tensor.to(target[key].dtype) if key in target else tensor
        del tensor
    for key in mapping.torch_defaults:
        if key in target and key not in by_key:
            yield key, target[key].clone() if "num_batches_tracked" in key else torch.zeros_like(target[key])


def _torch_part(values: "_Params", name: str, mapping: NameMapping, target, key: str):
    """MXNet ``name``'s value in torch's layout, as a tensor of its own (never sharing the caller's array)."""
    import torch
    value = values[name]
    source = _numpy(value)
    array = mapping.to_torch(name, source)
    if target is not None and tuple(target.shape) != array.shape:
        raise WeightShapeError(f"MXNet {name!r} {tuple(source.shape)} -> torch {key!r}: expected "
                               f"{tuple(target.shape)}, received {array.shape}; the torch model "
                               f"does not match the mapping (rebuild it with the same arguments)")
    # read from the file or asnumpy'd for us, or made anew by the layout change: ours; else the caller's, copied
    owned = values.fresh or hasattr(value, "asnumpy") or not np.may_share_memory(array, source)
    return torch.from_numpy(np.ascontiguousarray(array) if owned else np.array(array))


class _Params(Mapping):
    """MXNet values by name without the ``arg:``/``aux:`` prefixes, each taken from its source when asked for (from
    an ``NDArrayFile``: read from the file then, a new array of its own: ``fresh``)."""

    def __init__(self, source: Mapping):
        self._source = source
        self._keys = {k.split(":", 1)[1] if k.startswith(("arg:", "aux:")) else k: k for k in source}
        self.fresh = isinstance(source, NDArrayFile)

    def __getitem__(self, name):
        return self._source[self._keys[name]]

    def __iter__(self):
        return iter(self._keys)

    def __len__(self):
        return len(self._keys)

    def __contains__(self, name):
        return name in self._keys


def _read_params(mx_params) -> _Params:
    if isinstance(mx_params, (str, os.PathLike)):
        path = os.fspath(mx_params)
        if not os.path.isfile(path):
            raise InputFileError(f"MXNet params file {path!r}: not found; give the .params file the model was "
                                 f"saved to")
        try:
            mx_params = index_ndarrays(path)
        except MXNetFileError as exc:
            raise InputFileError(f"MXNet params file {path!r}: expected an NDArray dict written by mx.nd.save "
                                 f"or HybridBlock.export, could not read it ({exc})") from None
        if not mx_params.named:
            raise InputFileError(f"MXNet params file {path!r}: expected named arrays, received a list of "
                                 f"{len(mx_params)}; save a dict name -> NDArray")
    if not isinstance(mx_params, Mapping):
        raise MappingError(f"mx_params: expected a dict name -> array or a .params path, received "
                           f"{type(mx_params).__name__}; pass "
                           f"{{p.name: p.data() for p in net.collect_params().values()}}")
    return _Params(mx_params)


def _numpy(value) -> np.ndarray:
    return value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)
