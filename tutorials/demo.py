"""Fine-tune resnet18_v1 with LrTrainer: a slow backbone and a fast head, on synthetic data.

Run from the repository root: ``python -m tutorials.demo [--steps 20] [--out demo_output]``. It prints the
explanation table (why each parameter has its lr_mult and wd_mult) and the loss, and writes under ``--out``:
``explain.txt``, ``loss.csv``, ``settings.json`` (what ``migrate`` reads), ``trainer.states`` and ``model.params``.
The network starts from random weights (no download); the data are 10 noisy class templates, so the loss falls.
"""
import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

from gluon_lr import LrTrainer, Rule  # noqa: E402
from gluon_lr.settings import atomic_write  # noqa: E402

CLASSES, SIZE, BATCH = 10, 32, 16
NOISE = 1.0
RULES = [
    Rule("*", lr_mult=0.1),                   # backbone: ten times slower than the base rate
    Rule("resnetv10_dense0_*", lr_mult=1.0),  # head: the full rate
    Rule("norm", wd_mult=0.0),                # no weight decay on BatchNorm gamma/beta
    Rule("bias", wd_mult=0.0),                # nor on biases
]


def synthetic_batches(steps: int, seed: int = 0):
    """Yield (data, label) batches: each class is a fixed random image plus noise."""
    rng = np.random.RandomState(seed)
    templates = rng.normal(size=(CLASSES, 3, SIZE, SIZE)).astype("float32")
    for _ in range(steps):
        label = rng.randint(0, CLASSES, size=BATCH)
        data = templates[label] + NOISE * rng.normal(size=(BATCH, 3, SIZE, SIZE)).astype("float32")
        yield mx.nd.array(data), mx.nd.array(label)


def train(steps: int, out: str) -> list:
    """Fine-tune for ``steps`` steps, write the outputs under ``out`` and return the losses."""
    mx.random.seed(0)
    net = gluon.model_zoo.vision.resnet18_v1(classes=CLASSES, prefix="resnetv10_")  # fixed names for RULES
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = LrTrainer(net, "sgd", {"learning_rate": 0.02, "momentum": 0.9, "wd": 1e-4}, rules=RULES)
    explanation = str(trainer.explain())
    print(explanation)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    losses = []
    for step, (data, label) in enumerate(synthetic_batches(steps), start=1):
        with autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(BATCH)
        losses.append(float(loss.mean().asscalar()))
        if step == 1 or step % 5 == 0 or step == steps:
            print(f"step {step:3d}  loss {losses[-1]:.4f}", file=sys.stderr)
    os.makedirs(out, exist_ok=True)
    atomic_write(os.path.join(out, "explain.txt"), (explanation + "\n").encode())
    atomic_write(os.path.join(out, "loss.csv"),
                 ("step,loss\n" + "".join(f"{i},{v:.6f}\n" for i, v in enumerate(losses, 1))).encode())
    trainer.export_settings(os.path.join(out, "settings.json"))
    trainer.save_states(os.path.join(out, "trainer.states"))
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        net.save_parameters(os.path.join(tmp, "model.params"))
        os.replace(os.path.join(tmp, "model.params"), os.path.join(out, "model.params"))
    return losses


def main(argv=None) -> int:
    """Run the demo; print the explanation table and the first and last loss."""
    parser = argparse.ArgumentParser(description="Fine-tune resnet18_v1 with LrTrainer on synthetic data.")
    parser.add_argument("--steps", type=int, default=20, help="training steps (batch of 16 each)")
    parser.add_argument("--out", default="demo_output", help="folder for the outputs")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    losses = train(args.steps, args.out)
    print(f"loss: first step {losses[0]:.4f}, mean of last 5 steps {np.mean(losses[-5:]):.4f} "
          f"({args.steps} steps, {time.perf_counter() - start:.1f} s); outputs in {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
