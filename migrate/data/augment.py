"""``ImageRecordAugment``: the geometry of ``mx.io.ImageRecordIter``'s default augmenter (``resize``, ``rand_crop``,
``rand_mirror``, ``data_shape``) as a transform for ``RecordDataset``, so a migrated training sees the crops it saw.

ImageRecordIter resizes the shorter edge to ``resize`` (the longer one to ``resize * long // short``, integer
division) with OpenCV's bilinear ``INTER_LINEAR`` (its default ``inter_method=1``), crops ``data_shape``'s height x
width at a uniform random offset (``rand_crop``) or at the centre, and flips left-right with probability 1/2
(``rand_mirror``). Here the resize is torch's bilinear interpolation without antialiasing (half-pixel centres, as
OpenCV): within 1 of ImageRecordIter's pixels (``tests/migrate/data/test_recordio.py``; OpenCV rounds its fixed-point sums
differently), where Pillow's antialiased resize (torchvision's ``Resize`` on PIL images) differs by up to ~50. The
crops and flips are ImageRecordIter's. Random draws use torch's generator (seeded per DataLoader worker).
"""
from __future__ import annotations

import torch

from migrate.data.images import pixels_tensor
from migrate.errors import RecordIOError

__all__ = ["ImageRecordAugment"]


class ImageRecordAugment:
    """ImageRecordIter's resize, crop and mirror of a decoded RGB ``PIL.Image``; gives a ``(3, H, W)`` uint8 tensor.

    Args:
        data_shape: ``(3, height, width)`` of the output, as ImageRecordIter's ``data_shape``.
        resize: The shorter edge's length before cropping; -1 (ImageRecordIter's default) keeps the size.
        rand_crop: Crop at a uniform random offset; False crops the centre.
        rand_mirror: Flip left-right with probability 1/2.

    Raises (when called):
        RecordIOError: the (resized) image is smaller than ``data_shape``, which ImageRecordIter refuses too.

    Examples:
        >>> augment = ImageRecordAugment((3, 224, 224), resize=256, rand_crop=True, rand_mirror=True)
        >>> dataset = RecordDataset("train.rec", "train.idx", transform=augment)  # doctest: +SKIP
        >>> dataset[0][0].shape  # doctest: +SKIP
        torch.Size([3, 224, 224])
    """

    def __init__(self, data_shape=(3, 224, 224), resize: int = -1, rand_crop: bool = False,
                 rand_mirror: bool = False):
        if len(data_shape) != 3 or data_shape[0] != 3 or min(data_shape) < 1:
            raise ValueError(f"data_shape must be (3, height, width) with positive sizes, got {tuple(data_shape)}")
        self.height, self.width = int(data_shape[1]), int(data_shape[2])
        self.resize, self.rand_crop, self.rand_mirror = int(resize), bool(rand_crop), bool(rand_mirror)

    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) after ImageRecordIter's ``resize`` (integer arithmetic as in its augmenter)."""
        if self.resize <= 0:
            return width, height
        if height > width:
            return self.resize, self.resize * height // width
        return self.resize * width // height, self.resize

    def __call__(self, image) -> torch.Tensor:
        width, height = self.resized_size(*image.size)
        if width < self.width or height < self.height:
            raise RecordIOError(f"an image of {image.size[0]}x{image.size[1]} (width x height; {width}x{height} after "
                                f"resize={self.resize}) is smaller than data_shape's {self.width}x{self.height}; "
                                f"ImageRecordIter refuses it too: give a larger resize")
        if self.rand_crop:
            x = int(torch.randint(width - self.width + 1, ()).item())
            y = int(torch.randint(height - self.height + 1, ()).item())
        else:
            x, y = (width - self.width) // 2, (height - self.height) // 2
        pixels = pixels_tensor(image).permute(2, 0, 1)  # CHW view of HWC memory: channels-last for interpolate
        if (width, height) != image.size:
            pixels = torch.nn.functional.interpolate(pixels[None], size=(height, width), mode="bilinear",
                                                     align_corners=False, antialias=False)[0]
        crop = pixels[:, y:y + self.height, x:x + self.width]
        if self.rand_mirror and torch.rand(()).item() < 0.5:
            crop = crop.flip(2)
        return crop.contiguous()

    def __repr__(self) -> str:
        return (f"ImageRecordAugment(data_shape=(3, {self.height}, {self.width}), resize={self.resize}, "
                f"rand_crop={self.rand_crop}, rand_mirror={self.rand_mirror})")
