"""``RecordDataset``: an MXNet RecordIO image set (im2rec's ``.rec`` + ``.idx``) as a ``torch.utils.data.Dataset``."""
from __future__ import annotations

import numpy as np
import torch

from migrate.data.images import open_image, pixels_tensor
from migrate.data.record_file import RecordFile
from migrate.errors import RecordIOError

__all__ = ["RecordDataset"]


class RecordDataset(torch.utils.data.Dataset):
    """``(image, label)`` pairs of an MXNet image RecordIO file, for ``DataLoader`` (any ``num_workers``, shuffling,
    ``DistributedSampler``).

    Item ``i`` is the record of ``keys[i]``: the ``keys`` given (a subset, in their order: insightface's images
    without its header and identity records, ``insightface_dataset``), else the ``.idx`` keys in their order (without
    an ``.idx``, the records in file order). Each worker process opens its own handle on first use and reads by offset,
    so shuffled reads from several workers never share a file position. The image is decoded with Pillow to RGB,
    pixel-equal to ``mx.image.imdecode`` for JPEG and PNG (see ``migrate.data.images``), or left as the payload's
    bytes (``raw``: records that hold no image, or a decoder of your own).

    Args:
        path: The ``.rec`` file.
        idx: Its ``.idx``, or None to scan the ``.rec`` once (``RecordFile``).
        transform: Called on the decoded ``PIL.Image`` (RGB): ``ImageRecordAugment`` (ImageRecordIter's resize,
            crop and mirror) or torchvision transforms ending in ``PILToTensor``; None gives a ``(3, H, W)`` uint8
            tensor.
        target_transform: Called on the label tensor.
        label_width: When given, every record must hold this many labels (a number label counts as 1), as
            ``ImageRecordIter(label_width=...)`` expects.
        key_type: The ``.idx`` keys' type (MXNet's ``key_type``).
        keys: The keys to serve, in this order (each must be in the file; a key may repeat), or None: every key.
        raw: True gives each payload's bytes, undecoded (``transform``, when given, is called on them).

    Returns (per item):
        (image, label): the label a float32 tensor, 0-d for a number label, 1-d for an array label (multi-label,
        detection boxes: give the DataLoader a ``collate_fn`` when their lengths differ); with ``raw`` the payload's
        ``bytes`` for the image.

    Raises:
        RecordIOError: at construction, a file that is not RecordIO or an ``.idx`` pointing outside it; per item, a
            broken record, a label count that disagrees with the header or with ``label_width``, a payload that is
            no image (each names the file, the key and the byte offset). Nothing is skipped silently.
        RecordKeyError: at construction, ``keys`` the file does not hold (names how many, and the first ones).

    Examples:
        >>> dataset = RecordDataset("train.rec", "train.idx")  # doctest: +SKIP
        >>> loader = torch.utils.data.DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4)  # doctest: +SKIP
        >>> image, label = dataset[0]  # doctest: +SKIP
        >>> image.dtype, image.shape[0], label.dtype  # doctest: +SKIP
        (torch.uint8, 3, torch.float32)
    """

    def __init__(self, path, idx=None, transform=None, target_transform=None, label_width=None, key_type=int,
                 keys=None, raw=False):
        self.records = RecordFile(path, idx, key_type=key_type)
        self.keys = self.records.keys() if keys is None else self.records.held_keys(keys)
        self.transform, self.target_transform, self.label_width = transform, target_transform, label_width
        self.raw = raw

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index: int):
        key = self.keys[index]
        header, payload = self.records.unpacked(key)
        if self.label_width is not None and max(header.flag, 1) != self.label_width:
            raise RecordIOError(f"{self.records.where(key)}: {max(header.flag, 1)} labels (header flag "
                                f"{header.flag}), expected label_width={self.label_width}",
                                self.records.path, self.records.offset(key))
        if self.raw:
            image = self.transform(payload) if self.transform is not None else payload
        else:
            image = self._image(key, payload)
        label = torch.from_numpy(np.asarray(header.label, dtype=np.float32))
        return image, (self.target_transform(label) if self.target_transform is not None else label)

    def _image(self, key, payload: bytes):
        """The decoded payload through ``transform`` (a ``(3, H, W)`` uint8 tensor without one)."""
        try:
            image = open_image(payload, self.records.where(key))
        except RecordIOError as exc:
            exc.path, exc.offset = self.records.path, self.records.offset(key)
            raise
        return self.transform(image) if self.transform is not None else _chw_tensor(image)

    def __repr__(self) -> str:
        what = "payloads" if self.raw else "images"
        return f"RecordDataset({self.records.path!r}, idx={self.records.idx_path!r}): {len(self)} {what}"


def _chw_tensor(image) -> torch.Tensor:
    """A ``(3, H, W)`` uint8 tensor of an RGB PIL image (contiguous)."""
    return pixels_tensor(image).permute(2, 0, 1).contiguous()
