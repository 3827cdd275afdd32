"""Image payloads decoded to RGB uint8 with Pillow, with the pixels MXNet's OpenCV decode gives.

``mx.image.imdecode`` (OpenCV ``imdecode`` with ``IMREAD_COLOR``, then BGR to RGB) is what ``ImageRecordIter`` and
GluonCV's record datasets see. Measured against it (``tests/test_torch_env_recordio.py``, MXNet 1.9.1's OpenCV against
Pillow 13.0): pixel-equal for baseline and progressive JPEG (4:4:4, 4:2:2, 4:2:0, odd sizes, grayscale), CMYK JPEG,
PNG (RGB, RGBA, gray, palette, 16-bit), BMP. Two places where Pillow's own conversion differs from OpenCV are done
OpenCV's way here: CMYK (Pillow's formula is off by up to 1) and 16-bit grayscale (Pillow clips to 255, OpenCV keeps
the high byte). Like MXNet, the EXIF orientation is not applied, and alpha is dropped (not composited).
"""
from __future__ import annotations

import io
import warnings

import numpy as np

from migrate.errors import RecordIOError

__all__ = ["decode_image", "image_format", "open_image", "pixels_tensor"]

_SIGNATURES = ((b"\xff\xd8\xff", "jpg"), (b"\x89PNG\r\n\x1a\n", "png"), (b"BM", "bmp"), (b"GIF8", "gif"),
               (b"II*\x00", "tif"), (b"MM\x00*", "tif"))


def image_format(payload: bytes) -> str | None:
    """The image format a payload's first bytes announce (``jpg``, ``png``, ``bmp``, ``gif``, ``tif``, ``webp``),
    or None.

    Examples:
        >>> image_format(b"\\x89PNG\\r\\n\\x1a\\n...")
        'png'
    """
    head = bytes(payload[:12])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    return next((name for signature, name in _SIGNATURES if head.startswith(signature)), None)


def open_image(payload: bytes, where: str = "the payload"):
    """The payload decoded to an RGB ``PIL.Image.Image`` whose pixels are those of ``mx.image.imdecode``.

    Args:
        payload: The encoded image (what ``unpack`` returns after the header).
        where: How errors name the payload (``RecordDataset`` passes the file, key and byte offset).

    Returns:
        A decoded (loaded) image in mode ``RGB``.

    Raises:
        RecordIOError: Pillow cannot decode the payload (not an image, or truncated).

    Examples:
        >>> image = open_image(payload)  # doctest: +SKIP
        >>> image.mode, image.size  # doctest: +SKIP
        ('RGB', (500, 375))
    """
    from PIL import Image
    try:
        image = Image.open(io.BytesIO(payload))
        image.load()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        found = image_format(payload) or f"no known image format (first bytes {bytes(payload[:8]).hex()})"
        raise RecordIOError(f"{where}: {len(payload)} bytes that Pillow cannot decode as an image ({found}): "
                            f"{str(exc)[:200]}") from None
    if image.mode == "RGB":
        return image
    if image.mode == "CMYK":
        return Image.fromarray(_cmyk_as_opencv(image), "RGB")
    if image.mode.startswith("I;16") or (image.mode == "I" and image.format == "PNG"):  # Pillow < 10: mode I
        high = (np.asarray(image).astype(np.uint16) >> 8).astype(np.uint8)
        return Image.fromarray(np.repeat(high[..., None], 3, axis=2), "RGB")
    return image.convert("RGB")


def _cmyk_as_opencv(image) -> np.ndarray:
    """RGB of a CMYK JPEG as OpenCV computes it from libjpeg's raw (Adobe: inverted) values."""
    values = np.asarray(image).astype(np.int32)
    raw = 255 - values if "adobe" in image.info else values  # Pillow un-inverts Adobe CMYK; OpenCV reads it raw
    k = raw[..., 3]
    return np.stack([k - (((255 - raw[..., i]) * k) >> 8) for i in range(3)], axis=-1).astype(np.uint8)


def decode_image(payload: bytes, where: str = "the payload") -> np.ndarray:
    """The payload decoded to an ``(H, W, 3)`` uint8 RGB array, as ``mx.image.imdecode(payload).asnumpy()``.

    Args:
        payload: The encoded image.
        where: How errors name the payload.

    Returns:
        The pixels, height x width x RGB.

    Raises:
        RecordIOError: the payload is no image Pillow can decode.

    Examples:
        >>> header, payload = unpack(records.record(0))  # doctest: +SKIP
        >>> decode_image(payload).shape  # doctest: +SKIP
        (375, 500, 3)
    """
    return np.asarray(open_image(payload, where))


def pixels_tensor(image):
    """An RGB ``PIL.Image`` as an ``(H, W, 3)`` uint8 torch tensor (one copy out of Pillow; read-only memory: use it
    as an input, ``.contiguous()`` or ``.clone()`` it to write).

    Examples:
        >>> pixels_tensor(open_image(payload)).permute(2, 0, 1).contiguous().shape  # doctest: +SKIP
        torch.Size([3, 375, 500])
    """
    import torch
    array = np.asarray(image)  # Pillow hands its pixels over in a bytes object: read-only
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "not writable": nothing writes into this view
        return torch.from_numpy(array)
