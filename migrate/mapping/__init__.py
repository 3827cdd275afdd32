"""Stage 1 of a migration, MXNet names -> torch names, in pipeline order: both models exported to ONNX (the MXNet
model by its source, ``migrate.source``; the torch model by ``migrate.onnx_export``), ``graph`` (the parameter DAG in
canonical order), ``match`` (pairing two graphs), ``table`` (``NameMapping``, the result, and its file),
``name_mapping`` (the stages in one call), ``generated_mapping`` (a generated module's, read from its
``MXNET_NAMES``), then ``weights`` (values; ``stream`` writes them one tensor at a time). ``migrate.verification``
checks a mapping by the numbers.

The front door: what the rest of ``migrate`` (its CLI included) uses from here. Nothing imports MXNet until a
function reads an MXNet model.

Examples:
    >>> from migrate.mapping import NameMapping, name_mapping
    >>> NameMapping.__name__
    'NameMapping'
"""
from migrate.mapping.generated_mapping import generated_mapping
from migrate.mapping.name_mapping import name_mapping
from migrate.mapping.stream import read_safetensors, write_safetensors, write_state_dict
from migrate.mapping.table import NameMapping
from migrate.mapping.weights import convert_weights, converted_keys, load_mxnet_weights

__all__ = ["NameMapping", "convert_weights", "converted_keys", "generated_mapping", "load_mxnet_weights",
           "name_mapping", "read_safetensors", "write_safetensors", "write_state_dict"]
