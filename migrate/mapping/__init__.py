"""Stage 1 of a migration, MXNet names -> torch names, in pipeline order: ``export`` (both models to ONNX), ``graph``
(the parameter DAG in canonical order), ``match`` (pairing two graphs), ``table`` (``NameMapping``, the result, and its
file), ``name_mapping`` (the three stages in one call), then ``verify`` (numeric check) and ``weights`` (values;
``stream`` writes them one tensor at a time). Without MXNet: ``file_source`` reads the files, ``translated_export``
exports the graph through its torch translation, ``verify_translated`` compares against it, and
``generated_mapping`` maps a generated module by its ``MXNET_NAMES``.

The front door: what the rest of ``migrate`` (its CLI included) uses from here. Nothing imports MXNet until a
function reads an MXNet model.

Examples:
    >>> from migrate.mapping import NameMapping, name_mapping
    >>> NameMapping.__name__
    'NameMapping'
"""
from migrate.mapping.export import EXPORTED_WITH_MXNET, READ_WITHOUT_MXNET, MxSource, load_mxnet, normalize_shapes
from migrate.mapping.file_source import files_reader, model_source, read_mxnet_files
from migrate.mapping.generated_mapping import generated_mapping
from migrate.mapping.name_mapping import name_mapping
from migrate.mapping.stream import read_safetensors, write_safetensors, write_state_dict
from migrate.mapping.table import NameMapping
from migrate.mapping.verify import NodeCheck, VerifyReport, verify
from migrate.mapping.verify_translated import verify_translated
from migrate.mapping.weights import convert_weights, converted_keys, load_mxnet_weights

__all__ = ["EXPORTED_WITH_MXNET", "READ_WITHOUT_MXNET", "MxSource", "NameMapping", "NodeCheck", "VerifyReport",
           "convert_weights", "converted_keys", "files_reader", "generated_mapping", "load_mxnet", "load_mxnet_weights",
           "model_source", "name_mapping", "normalize_shapes", "read_mxnet_files", "read_safetensors", "verify",
           "verify_translated", "write_safetensors", "write_state_dict"]
