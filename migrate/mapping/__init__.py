"""Stage 1 of a migration, MXNet names -> torch names, in pipeline order: ``export`` (both models to ONNX), ``graph``
(the parameter DAG in canonical order), ``match`` (pairing two graphs), ``table`` (``NameMapping``, the result, and its
file), ``name_mapping`` (the three stages in one call), then ``verify`` (numeric check) and ``weights`` (values;
``stream`` writes them one tensor at a time).

The front door: what the rest of ``migrate`` (its CLI included) uses from here. Nothing imports MXNet until a
function reads an MXNet model.

Examples:
    >>> from migrate.mapping import NameMapping, name_mapping
    >>> NameMapping.__name__
    'NameMapping'
"""
from migrate.mapping.export import MxSource, load_mxnet, normalize_shapes
from migrate.mapping.name_mapping import name_mapping
from migrate.mapping.stream import read_safetensors, write_safetensors, write_state_dict
from migrate.mapping.table import NameMapping
from migrate.mapping.verify import NodeCheck, VerifyReport, verify
from migrate.mapping.weights import convert_weights, converted_keys, load_mxnet_weights

__all__ = ["MxSource", "NameMapping", "NodeCheck", "VerifyReport", "convert_weights", "converted_keys", "load_mxnet",
           "load_mxnet_weights", "name_mapping", "normalize_shapes", "read_safetensors", "verify",
           "write_safetensors", "write_state_dict"]
