"""The main job: tutorials 1 and 4 end to end on the embedded default, in a few minutes on a 2-core CPU.

Run from the repository root: ``python -m tutorials.demo [--steps 20] [--out demo_output] [--fast]`` (or
``bash scripts/demo.sh``, which installs everything first). The default is a model-zoo resnet18_v1 with random
initial weights and synthetic data (10 noisy class templates, 32x32), so nothing is downloaded.

1. Tutorial 1 (``tutorials/t01_finetune.py``, outputs in ``OUT/t01``): the two-``set_lr_mult`` pitfall measured,
   ``trainer.explain()``, fine-tuning with a slow backbone and a fast head, each group's effective learning rate
   configured and measured, the settings file.
2. Tutorial 4 (``tutorials/t04_migrate.py``, outputs in ``OUT/t04``): N MXNet steps, the ``migrate all`` command
   (its report in ``OUT/t04/migrated/report.txt``), N torch steps with the migrated weights, param groups and
   optimizer state, against MXNet's own next N steps; the loss plot in ``OUT/t04/loss.png``.
"""
import argparse
import os
import sys
import time

from tutorials import _common, t01_finetune, t04_migrate


def _parse(argv) -> argparse.Namespace:
    """The command line: --steps, --out, --fast (the tutorials' fast settings)."""
    return _common.parse_args(argv, "The main job: tutorials 1 (fine-tune with LrTrainer) and 4 (migrate to "
                              "PyTorch and continue there) end to end.", steps=20, fast_steps=None,
                              out="demo_output", steps_help="tutorial 1's steps, and N of tutorial 4 (N MXNet "
                              "steps, then N torch steps)")


def main(argv=None) -> int:
    """Run tutorials 1 and 4 into ``--out``; say where the explanation, the report and the plot are.

    Args:
        argv: Command-line arguments (None reads sys.argv).

    Returns:
        0, or the first non-zero exit code of a tutorial (the migrate command's, say).

    Example:
        >>> main(["--fast", "--out", "/tmp/demo"])
        0
    """
    args = _parse(argv)
    start = time.perf_counter()
    sizing = ["--fast"] if args.fast else ["--steps", str(args.steps)]
    first, fourth = os.path.join(args.out, "t01"), os.path.join(args.out, "t04")
    print("=== Tutorial 1: fine-tune with a slow backbone and a fast head (LrTrainer) ===\n", flush=True)
    code = t01_finetune.main(sizing + ["--out", first])
    if code == 0:
        print("\n=== Tutorial 4: migrate to PyTorch and continue the training there ===\n", flush=True)
        code = t04_migrate.main(sizing + ["--out", fourth])
    if code != 0:
        print(f"demo: stopped, exit code {code}; see the messages above", file=sys.stderr)
        return code
    print(f"\ndemo done in {time.perf_counter() - start:.0f} s. Outputs:\n"
          f"  explanation table   {os.path.join(first, 'explain.txt')}\n"
          f"  settings file       {os.path.join(first, 'settings.json')}\n"
          f"  migrate report      {os.path.join(fourth, 'migrated', 'report.txt')}\n"
          f"  loss plot           {os.path.join(fourth, 'loss.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
