"""Tutorial 7: the MXNet training set (im2rec's ``.rec`` + ``.idx``) comes to PyTorch too, read without MXNet.

The story. Your MXNet training read its images from ``train.rec``/``train.idx``, packed by im2rec, through
``mx.io.ImageRecordIter``. Tutorials 4 and 6 carried the model, its settings and its optimizer state to torch; the
data must come too, and the torch environment has no MXNet (it cannot have it: numpy 2). ``migrate.data`` reads the
same files in torch: ``RecordDataset`` decodes each record to the pixels ImageRecordIter gave, ``ImageRecordAugment``
crops (and flips) as ImageRecordIter did, and a ``DataLoader`` with worker processes feeds the training.

1. An MXNet-style training set: noisy class images (20x20 JPEGs) packed as im2rec packs them (``IRHeader(0, label,
   index, 0)``, ``mx.recordio.pack``, ``MXIndexedRecordIO``).
2. MXNet trains N steps on ``ImageRecordIter(data_shape=(3, 16, 16))`` batches (the centre crop; no shuffling, so
   the batches follow the record order), with LrTrainer and tutorial 6's network, and writes what ``migrate`` reads;
   ``migrate all --torch generate`` carries it to torch.
3. torch reads the same ``.rec`` with ``RecordDataset(transform=ImageRecordAugment((3, 16, 16)))`` in a
   ``DataLoader(num_workers=2)``: the records MXNet would have read next, in the same order, and trains N steps on
   them. MXNet trains the same N steps, for reference.
4. For the rest of the training: ``shuffle=True`` and random crops and flips (``rand_crop``, ``rand_mirror``); one
   such epoch with 2 workers reads all the records, with their labels.

What to expect. The batches torch reads equal ImageRecordIter's pixel for pixel (Pillow decodes these JPEGs as
OpenCV does; the centre crop is the same) with the same labels, so the first torch loss equals MXNet's to float32
precision and the next ones follow MXNet's own next steps.

Run: ``python -m tutorials.t07_recordio [--steps 6] [--out tutorial_output/t07] [--fast]``. Writes under ``--out``:
``data/`` (train.rec, train.idx), ``mxnet/`` (what migrate reads), ``migrated/`` (``model.py`` and what migrate
wrote), ``loss.csv`` and ``summary.json``.
"""
import io
import os
import sys
import time

from tutorials import _common, t06_generate

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import gluon  # noqa: E402

from gluon_lr import LrTrainer, Rule  # noqa: E402

CLASSES, BATCH, STORED, SHAPE = t06_generate.CLASSES, t06_generate.BATCH, (20, 20), t06_generate.SHAPE
RECORDS = 12 * BATCH  # the training set: 96 images


def write_training_set(folder: str, count: int = RECORDS) -> tuple:
    """train.rec + train.idx of ``count`` class images as im2rec packs JPEGs (quality 95); (rec, idx, labels)."""
    from PIL import Image
    os.makedirs(folder, exist_ok=True)
    rec, idx = os.path.join(folder, "train.rec"), os.path.join(folder, "train.idx")
    rng = np.random.RandomState(0)
    templates = rng.uniform(40, 215, size=(CLASSES, 1, 1, 3)) + rng.normal(0, 30, size=(CLASSES,) + STORED + (3,))
    labels = rng.randint(0, CLASSES, size=count)
    writer = mx.recordio.MXIndexedRecordIO(idx, rec, "w")
    for index, label in enumerate(labels):
        pixels = np.clip(templates[label] + rng.normal(0, 25, STORED + (3,)), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, "JPEG", quality=95)
        writer.write_idx(index, mx.recordio.pack(mx.recordio.IRHeader(0, float(label), index, 0), buffer.getvalue()))
    writer.close()
    return rec, idx, labels


def mxnet_batches(rec: str, idx: str) -> list:
    """ImageRecordIter's batches as numpy (data float32 NCHW, label), in record order (centre crop, no shuffle)."""
    batches = mx.io.ImageRecordIter(path_imgrec=rec, path_imgidx=idx, data_shape=SHAPE, batch_size=BATCH,
                                    shuffle=False, preprocess_threads=2, verbose=False)
    return [(batch.data[0].asnumpy(), batch.label[0].asnumpy()) for batch in batches]


def mxnet_phase(steps: int, batches: list, folder: str, log=sys.stderr) -> tuple:
    """Tutorial 6's network trained ``2 * steps`` steps on ``batches``; migrate's inputs written after ``steps``.

    Returns:
        (losses of all 2 * steps steps, the network after them).
    """
    mx.random.seed(0)
    net = t06_generate.TinySENet(prefix="senet_")
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = LrTrainer(net, "sgd", {"learning_rate": 0.02, "momentum": 0.9, "wd": 1e-4},
                        rules=[Rule("senet_dense0_*", lr_mult=2.0)], kvstore=None)
    loss_fn, losses = gluon.loss.SoftmaxCrossEntropyLoss(), []
    for step, (data, label) in enumerate(batches[:2 * steps], start=1):
        losses.append(_common.train_step(net, trainer, loss_fn, data, label, mx.cpu()))
        if step == steps:
            os.makedirs(folder, exist_ok=True)
            net.export(os.path.join(folder, "net"))
            trainer.export_settings(os.path.join(folder, "settings.json"))
            trainer.save_states(os.path.join(folder, "trainer.states"))
            print(f"MXNet: {steps} steps done on ImageRecordIter batches, migrate's inputs written to {folder}/",
                  file=log)
    return losses, net


def torch_loader(rec: str, idx: str, first: int, count: int):
    """The DataLoader that goes on where MXNet stopped: records ``first..first+count-1`` in order, 2 workers, the
    centre crop ImageRecordIter took. Only torch and migrate: this runs where MXNet is not installed."""
    import torch
    from migrate.data import ImageRecordAugment, RecordDataset
    dataset = RecordDataset(rec, idx, transform=ImageRecordAugment(SHAPE))
    return torch.utils.data.DataLoader(torch.utils.data.Subset(dataset, range(first, first + count)),
                                       batch_size=BATCH, shuffle=False, num_workers=2)


def torch_phase(folder: str, loader) -> tuple:
    """Load the generated model and migrate's folder, train on the loader's batches; (losses, the batches)."""
    import torch
    import migrate
    model = t06_generate.generated_class(os.path.join(folder, "model.py"))()
    optimizer, scheduler = migrate.load_migration(folder, model)
    loss_fn, losses, seen = torch.nn.CrossEntropyLoss(reduction="sum"), [], []
    model.train()
    for images, labels in loader:
        data = images.float()  # ImageRecordIter gives the 0..255 values as float32 (no mean, no scale here)
        optimizer.zero_grad()
        loss = loss_fn(model(data), labels.long())
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item() / len(labels))
        seen.append((data.numpy(), labels.numpy()))
    return losses, seen


def shuffled_epoch(rec: str, idx: str) -> list:
    """One epoch as the rest of the training would read: shuffled, random crops and flips, 2 workers; the labels."""
    import torch
    from migrate.data import ImageRecordAugment, RecordDataset
    augment = ImageRecordAugment(SHAPE, rand_crop=True, rand_mirror=True)
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(RecordDataset(rec, idx, transform=augment), batch_size=BATCH, shuffle=True,
                                         num_workers=2)
    return [int(label) for _, labels in loader for label in labels]


def compare(steps: int, mx_batches: list, torch_batches: list, mx_losses: list, torch_losses: list) -> dict:
    """How the torch batches and losses compare with MXNet's for the same steps."""
    pairs = list(zip(mx_batches[steps:2 * steps], torch_batches))
    return {"steps": steps, "batches": len(torch_batches),
            "pixel_gap": max(float(np.abs(m[0] - t[0]).max()) for m, t in pairs),
            "labels_equal": all(np.array_equal(m[1], t[1]) for m, t in pairs),
            "first_loss_rel_gap": abs(mx_losses[steps] - torch_losses[0]) / abs(mx_losses[steps]),
            "loss_gaps": [abs(a - b) for a, b in zip(mx_losses[steps:], torch_losses)],
            "mxnet_losses": mx_losses, "torch_losses": torch_losses}


def main(argv=None) -> int:
    """Run tutorial 7: a .rec training set; MXNet N steps -> ``migrate all`` -> torch N steps on the same .rec.

    Args:
        argv: Command-line arguments (None reads sys.argv).

    Returns:
        0, or the migrate command's exit code when it failed.

    Example:
        >>> main(["--fast", "--out", "/tmp/t07"])  # doctest: +SKIP
        0
    """
    from migrate.cli import main as migrate_main
    args = _common.parse_args(argv, "Tutorial 7: an MXNet RecordIO training set read in torch after the migration",
                              steps=6, fast_steps=3, out="tutorial_output/t07")
    start, n = time.perf_counter(), args.steps
    rec, idx, labels = write_training_set(os.path.join(args.out, "data"))
    print(f"training set: {rec} + train.idx, {len(labels)} JPEG records packed as im2rec packs them")
    mx_folder, folder = os.path.join(args.out, "mxnet"), os.path.join(args.out, "migrated")
    mx_batches = mxnet_batches(rec, idx)
    mx_losses, _ = mxnet_phase(n, mx_batches, mx_folder)
    command = t06_generate.migrate_args(mx_folder, folder)
    print(f"$ python -m migrate {' '.join(command)}")
    code = migrate_main(command)
    if code != 0:
        return code
    torch_losses, torch_batches = torch_phase(folder, torch_loader(rec, idx, n * BATCH, n * BATCH))
    summary = compare(n, mx_batches, torch_batches, mx_losses, torch_losses)
    summary["shuffled_epoch_labels"] = sorted(shuffled_epoch(rec, idx)) == sorted(labels.tolist())  # as stored
    _common.write_loss_csv(os.path.join(args.out, "loss.csv"), {"mxnet": mx_losses,
                                                                "mxnet_then_torch": mx_losses[:n] + torch_losses})
    _common.write_json(os.path.join(args.out, "summary.json"), summary)
    print(f"\ntorch read records {n * BATCH}..{2 * n * BATCH - 1} from {rec} with RecordDataset: pixels within "
          f"{summary['pixel_gap']:g} of ImageRecordIter's, labels equal: {summary['labels_equal']}; first torch loss "
          f"within {summary['first_loss_rel_gap']:.2g} of MXNet's (relative), all {n} within "
          f"{max(summary['loss_gaps']):.2g}; a shuffled epoch (2 workers, random crops and flips) gave the stored "
          f"labels, {len(labels)} records: "
          f"{summary['shuffled_epoch_labels']} ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
