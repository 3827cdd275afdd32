"""Benchmark: images per second of ``migrate.data.RecordDataset`` + torch ``DataLoader`` against MXNet's
``mx.io.ImageRecordIter`` on the same ``.rec``, with the same preprocessing and the same number of threads.

The set: ``--images`` synthetic JPEGs of ImageNet's typical size (width 400-500, height 300-400, quality 90, smooth
content with noise), written by ``mx.recordio.MXIndexedRecordIO`` as im2rec packs them (number labels 0..999).
Every pipeline decodes, resizes the shorter edge to 256 (bilinear), takes a random 224x224 crop, flips at random, and
gives shuffled uint8 batches of ``--batch`` in NCHW. Rows, all measured in one run:

- MXNet: ``ImageRecordIter(resize=256, rand_crop=True, rand_mirror=True, data_shape=(3, 224, 224), dtype='uint8',
  preprocess_threads=--threads, shuffle=True)`` (OpenCV decode and resize in C++ threads), reset between epochs;
- torch with torchvision's ``Resize(256)``, ``RandomCrop(224)``, ``RandomHorizontalFlip()``, ``PILToTensor()`` on the
  PIL image (Pillow's antialiased resize of the whole image);
- torch with ``ImageRecordAugment((3, 224, 224), resize=256, rand_crop=True, rand_mirror=True)`` (torch's bilinear
  resize, within 1 of ImageRecordIter's pixels);
both torch rows in ``DataLoader(RecordDataset(...), num_workers=--threads, shuffle=True, persistent_workers=True)``.

Epochs are interleaved round-robin (one warm-up epoch each, then ``--epochs`` timed) so that the load of a shared
machine hits every row alike; the median epoch gives the rate. Target: torch at least as fast (ratio >= 1). Run with
2 cores: ``OMP_NUM_THREADS=2 python bench/bench_recordio.py``.

Usage: ``python bench/bench_recordio.py [--images 1024] [--batch 32] [--threads 2] [--epochs 5]``
"""
import argparse
import io
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision import transforms  # noqa: E402

from migrate.data import ImageRecordAugment, RecordDataset  # noqa: E402


def _jpeg(rng: np.random.RandomState) -> bytes:
    """One synthetic photo-like JPEG: smooth colour fields, a few discs, sensor-like noise."""
    width, height = rng.randint(400, 501), rng.randint(300, 401)
    x, y = np.arange(width, dtype=np.float32)[None, :], np.arange(height, dtype=np.float32)[:, None]
    channels = []
    for phase in rng.uniform(0, 6.28, size=3):  # sin(u + v) from 1-D parts: a smooth field at little cost
        u, v = x / rng.uniform(20, 90) + phase, y / rng.uniform(30, 120)
        channels.append(127 + 100 * (np.sin(u) * np.cos(v) + np.cos(u) * np.sin(v)))
    picture = np.stack(channels, axis=-1)
    for _ in range(4):
        cx, cy, radius = rng.randint(0, width), rng.randint(0, height), rng.randint(20, 120)
        picture[(x - cx) ** 2 + (y - cy) ** 2 < radius ** 2] = rng.randint(0, 256, size=3)
    picture += rng.standard_normal(picture.shape).astype(np.float32) * 6
    buffer = io.BytesIO()
    Image.fromarray(np.clip(picture, 0, 255).astype(np.uint8)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def write_set(folder: str, count: int) -> tuple:
    """train.rec + train.idx of ``count`` JPEGs, written by MXNet as im2rec packs them; (rec, idx, mean KiB)."""
    rec, idx, rng = os.path.join(folder, "train.rec"), os.path.join(folder, "train.idx"), np.random.RandomState(0)
    writer, sizes = mx.recordio.MXIndexedRecordIO(idx, rec, "w"), []
    for i in range(count):
        payload = _jpeg(rng)
        sizes.append(len(payload))
        writer.write_idx(i, mx.recordio.pack(mx.recordio.IRHeader(0, float(i % 1000), i, 0), payload))
    writer.close()
    return rec, idx, statistics.mean(sizes) / 1024


TORCHVISION = transforms.Compose([transforms.Resize(256), transforms.RandomCrop(224), transforms.RandomHorizontalFlip(),
                                  transforms.PILToTensor()])
RECORD_AUGMENT = ImageRecordAugment((3, 224, 224), resize=256, rand_crop=True, rand_mirror=True)


def mxnet_iter(rec: str, idx: str, batch: int, threads: int):
    """ImageRecordIter with the preprocessing above (reset between epochs, as a training loop does)."""
    return mx.io.ImageRecordIter(path_imgrec=rec, path_imgidx=idx, data_shape=(3, 224, 224), batch_size=batch,
                                 resize=256, rand_crop=True, rand_mirror=True, shuffle=True, dtype="uint8",
                                 preprocess_threads=threads, round_batch=False, verbose=False)


def mxnet_epoch(batches) -> tuple:
    """(seconds, images) of one epoch of ImageRecordIter (the reset that starts it included)."""
    start, images = time.perf_counter(), 0
    batches.reset()
    for data_batch in batches:
        data_batch.data[0].wait_to_read()
        images += data_batch.data[0].shape[0] - data_batch.pad
    return time.perf_counter() - start, images


def torch_loader(rec: str, idx: str, batch: int, threads: int, augment):
    """RecordDataset + DataLoader with the preprocessing ``augment`` does (workers persist across epochs)."""
    dataset = RecordDataset(rec, idx, transform=augment)
    return torch.utils.data.DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=threads,
                                       persistent_workers=True, prefetch_factor=4)


def torch_epoch(loader) -> tuple:
    """(seconds, images) of one epoch of the DataLoader."""
    start, images = time.perf_counter(), 0
    for data, _ in loader:
        assert data.dtype == torch.uint8 and data.shape[1:] == (3, 224, 224)
        images += len(data)
    return time.perf_counter() - start, images


ROWS = {"mxnet": "MXNet ImageRecordIter (OpenCV, preprocess_threads)",
        "torchvision": "RecordDataset + DataLoader, torchvision transforms",
        "augment": "RecordDataset + DataLoader, ImageRecordAugment"}


def measure(rec: str, idx: str, args) -> dict:
    """Images per second of each pipeline per timed epoch, epochs interleaved round-robin after one warm-up each."""
    pipelines = {"mxnet": (mxnet_epoch, mxnet_iter(rec, idx, args.batch, args.threads)),
                 "torchvision": (torch_epoch, torch_loader(rec, idx, args.batch, args.threads, TORCHVISION)),
                 "augment": (torch_epoch, torch_loader(rec, idx, args.batch, args.threads, RECORD_AUGMENT))}
    rates = {name: [] for name in pipelines}
    for epoch in range(args.epochs + 1):  # epoch 0 warms up (page cache, workers, OpenCV)
        for name, (run, source) in pipelines.items():
            seconds, images = run(source)
            assert images == args.images, f"{name}: {images} images in an epoch of {args.images}"
            if epoch:
                rates[name].append(images / seconds)
    return rates


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="ImageRecordIter's preprocess_threads = DataLoader's "
                        "num_workers")
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        rec, idx, kib = write_set(folder, args.images)
        rates = measure(rec, idx, args)
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(f"{args.images} JPEGs (~450x350, {kib:.0f} KiB each): decode, resize 256, random crop 224, flip; batch "
          f"{args.batch}, {args.threads} threads; median of {args.epochs} interleaved epochs; {os.cpu_count()} CPUs")
    print(f"{'pipeline':<52} {'images/s':>9} {'min..max':>11} {'vs MXNet':>9}")
    for name, title in ROWS.items():
        spread = f"{min(rates[name]):.0f}..{max(rates[name]):.0f}"
        print(f"{title:<52} {median[name]:>9.0f} {spread:>11} {median[name] / median['mxnet']:>9.2f}")
    best = max(median["torchvision"], median["augment"]) / median["mxnet"]
    print(f"target: torch >= MXNet: {'met' if best >= 1 else 'NOT met'} (best ratio {best:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
