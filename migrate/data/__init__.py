"""MXNet's RecordIO datasets read in torch without MXNet: im2rec's ``.rec`` + ``.idx`` as a torch ``Dataset``.

``RecordFile`` (``record_file``) reads the records as ``MXRecordIO``/``MXIndexedRecordIO`` do (the framing in
``framing``, the ``.idx`` in ``index``); ``unpack``/``pack``/``RecordHeader`` (``header``) split a record into
``mx.recordio.IRHeader``'s fields and its payload; ``decode_image``/``open_image`` (``images``) decode the payload to
RGB with Pillow, pixel-equal to ``mx.image.imdecode`` for JPEG and PNG; ``RecordDataset`` (``dataset``) gives
``(image, label)`` to a ``DataLoader`` with any number of workers (a subset of keys, raw payloads);
``insightface_dataset`` (``insightface``) reads insightface's face sets (header and identity records) as its
``MXFaceDataset`` does; ``ImageRecordAugment`` (``augment``) resizes, crops and flips as ``ImageRecordIter`` did;
``convert_records`` (``convert``) writes a ``.rec`` out as an image folder or tar shards (``migrate data convert`` on
the command line).

Examples:
    >>> from migrate.data import RecordDataset
    >>> dataset = RecordDataset("train.rec", "train.idx")  # doctest: +SKIP
    >>> loader = torch.utils.data.DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4)  # doctest: +SKIP
"""
from migrate.data.augment import ImageRecordAugment
from migrate.data.convert import Conversion, convert_records
from migrate.data.dataset import RecordDataset
from migrate.data.framing import framed
from migrate.data.header import RecordHeader, pack, unpack
from migrate.data.images import decode_image, open_image
from migrate.data.insightface import identity_label, insightface_dataset, insightface_keys
from migrate.data.record_file import RecordFile

__all__ = [
    "Conversion",
    "ImageRecordAugment",
    "RecordDataset",
    "RecordFile",
    "RecordHeader",
    "convert_records",
    "decode_image",
    "framed",
    "identity_label",
    "insightface_dataset",
    "insightface_keys",
    "open_image",
    "pack",
    "unpack",
]
