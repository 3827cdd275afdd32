"""The MXNet model a migration reads: one type per way of reading it, one interface (``MxSource``).

``base`` (the interface: parameters, inputs, the graph's symbol JSON document, auxiliary states, node shapes, ONNX
export, node outputs, the model as MXNet runs it), ``live`` (``LiveSource``: MXNet holds the model) with its kinds
``gluon_block`` (``BlockSource``), ``recorded_block`` (``RecordedBlockSource``: a plain Block, its graph recorded
while it runs by ``recording``) and ``checkpoint`` (``CheckpointSource``: symbol/params files through MXNet),
``files`` (``FileSource``: the files read by ``mxformats`` without MXNet; ``translated``: its graph's torch translation
in MXNet's place), ``module_checkpoint`` (loss heads cut, for both file kinds) and ``reading`` (which kind reads a
model: ``model_source``, ``load_mxnet``). A new way of reading a model is one module: a class with ``accepts`` and
``read``, added to ``reading.LIVE_KINDS``.

Examples:
    >>> from migrate.source import model_source
    >>> source = model_source(("net-symbol.json", "net-0000.params"), [(1, 3, 8, 8)], ["float32"])  # doctest: +SKIP
"""
from migrate.source.base import EXPORTED_WITH_MXNET, MXNET, READ_WITHOUT_MXNET, TRANSLATION, MxSource
from migrate.source.checkpoint import CheckpointSource
from migrate.source.files import FileSource, read_mxnet_files
from migrate.source.gluon_block import BlockSource
from migrate.source.live import LiveSource
from migrate.source.recorded_block import RecordedBlockSource, record_block
from migrate.source.reading import (LIVE_KINDS, WITHOUT_MXNET_VARIABLE, files_reader, load_mxnet, model_source,
                                    mxnet_reads_files)

__all__ = ["EXPORTED_WITH_MXNET", "LIVE_KINDS", "MXNET", "READ_WITHOUT_MXNET", "TRANSLATION", "WITHOUT_MXNET_VARIABLE",
           "BlockSource", "CheckpointSource", "FileSource", "LiveSource", "MxSource", "RecordedBlockSource",
           "files_reader", "load_mxnet", "model_source", "mxnet_reads_files", "read_mxnet_files", "record_block"]
