"""insightface's RecordIO face sets (``train.rec`` + ``train.idx`` of MS1M, Glint360K, WebFace...) read as its
``MXFaceDataset`` reads them (``recognition/arcface_torch/dataset.py``), without MXNet.

The layout: record 0 is a header whose ``flag`` is > 0 and whose label holds ``[first identity key, end]``: the image
records are keys ``1 .. label[0] - 1``, then one record per identity (its label the ``[first, end)`` range of that
identity's image keys, no image) up to ``label[1] - 1``. An image record's label is the identity: a number, or an
array whose first value it is. A file whose record 0 has ``flag`` 0 is a plain set: every key is an image.

Examples:
    >>> dataset = insightface_dataset("faces_emore/train.rec", "faces_emore/train.idx",
    ...                               transform=torchvision.transforms.ToTensor())  # doctest: +SKIP
    >>> image, identity = dataset[0]  # doctest: +SKIP
    >>> identity.dtype  # doctest: +SKIP
    torch.int64
"""
from __future__ import annotations

import math

import torch

from migrate.data.dataset import RecordDataset
from migrate.data.record_file import RecordFile
from migrate.errors import RecordIOError

__all__ = ["insightface_dataset", "insightface_keys", "identity_label"]


def insightface_keys(records: RecordFile) -> list:
    """The image keys of an insightface set: ``1 .. label[0] - 1`` when record 0 is the header (``flag`` > 0), else
    every key (``MXFaceDataset``'s ``imgidx``).

    Raises:
        RecordKeyError: the file has no record 0.
        RecordIOError: record 0 is broken, or the header's range is not a whole number from 1 to the number of records
            + 1.

    Examples:
        >>> insightface_keys(RecordFile("train.rec", "train.idx"))[:3]  # doctest: +SKIP
        [1, 2, 3]
    """
    header, _ = records.unpacked(0)
    if header.flag == 0:
        return records.keys()
    end = float(header.label[0])
    if not (math.isfinite(end) and end.is_integer() and 1 <= end <= len(records) + 1):
        raise RecordIOError(f"{records.where(0)}: insightface's header says the images are keys 1 .. label[0] - 1, "
                            f"but label[0] is {end!r} for a file of {len(records)} records; is it an insightface set "
                            f"(header record 0, images, identity records)? read it with RecordDataset(keys=...)",
                            records.path, records.offset(0))
    return list(range(1, int(end)))


def identity_label(label: torch.Tensor) -> torch.Tensor:
    """An image record's identity as ``MXFaceDataset`` gives it: the number label, or an array label's first value,
    as an int64 tensor (truncated toward zero, as ``torch.tensor(label, dtype=torch.long)``).

    Examples:
        >>> identity_label(torch.tensor([7.0, 0.5]))
        tensor(7)
    """
    return label.reshape(-1)[0].long()


def insightface_dataset(path, idx=None, transform=None, raw: bool = False) -> RecordDataset:
    """The images of an insightface set with their identities: ``(image, int64 identity)`` per item, in key order,
    the header and identity records left out (``MXFaceDataset``'s samples and labels, for any ``num_workers``).

    Args:
        path: The ``train.rec``.
        idx: Its ``train.idx`` (or None: record numbers in file order, which are insightface's keys).
        transform: Called on the RGB ``PIL.Image`` (``MXFaceDataset`` decodes with ``mx.image.imdecode`` to the same
            pixels for JPEG and PNG), or on the bytes with ``raw``; None gives a ``(3, H, W)`` uint8 tensor.
        raw: True gives each image's encoded bytes.

    Returns:
        A ``RecordDataset`` over ``insightface_keys`` with ``identity_label`` as its ``target_transform``.

    Raises:
        RecordIOError, RecordKeyError: as ``insightface_keys`` and ``RecordDataset``.

    Examples:
        >>> loader = torch.utils.data.DataLoader(insightface_dataset("train.rec", "train.idx"), batch_size=128,
        ...                                      shuffle=True, num_workers=4)  # doctest: +SKIP
    """
    dataset = RecordDataset(path, idx, transform=transform, target_transform=identity_label, raw=raw)
    dataset.keys = dataset.records.held_keys(insightface_keys(dataset.records))  # the .idx read once
    return dataset
