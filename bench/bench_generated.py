"""Speed of generated modules against their hand-written twins on the CPU: one train step and one eval forward.

Run: OMP_NUM_THREADS=2 PYTHONPATH=. python bench/bench_generated.py [--batch 8] [--size 224] [--repeat 5]

For model-zoo resnet18_v1 and resnet50_v1 (torch's random initialization), the module ``generate_torch`` writes
against torchvision's resnet18 / resnet50: float32, and bfloat16 under ``torch.autocast("cpu")`` where the CPU has
bf16 instructions; "train" is forward, a summed loss, backward and a plain SGD step, "eval" a forward under
``torch.no_grad()``. Generated and twin run alternately, ``--repeat`` times after one warm-up round; the table gives
the medians and their ratio (generated / twin), measured in one run, and the 1-minute load average before each row
(the ratio holds on a shared machine, the milliseconds do not). The GPU table and the rows' details:
``devtools/generated_speed.py``.
"""
import argparse
import os
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from devtools.generated_speed import prepare, table  # noqa: E402 (the repository root on the path first)

warnings.filterwarnings("ignore")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    import torch
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    dtypes = [torch.float32] + ([torch.bfloat16] if torch.cpu._is_avx512_bf16_supported() else [])
    with tempfile.TemporaryDirectory() as folder:
        prepare(folder)
        print(f"{torch.get_num_threads()} threads")
        table(folder, "cpu", args.batch, args.size, args.repeat, 1, dtypes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
