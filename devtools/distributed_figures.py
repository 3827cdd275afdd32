"""The figures of docs/migrate/distributed.md's gradient-scale table, printed from the runs of
``tests/migrate/test_ddp.py::TestMultiDeviceRun`` (whose assertions bound them by 1e-5).

Run in ./.venv (MXNet), with ./.venv-torch built: ``PYTHONPATH=. .venv/bin/python -m devtools.distributed_figures``
(about 30 s). Prints, after 4 steps, each run's largest weight difference to MXNet (device 0), the ranks' average
BatchNorm running mean against the devices' average, and FSDP2 against one process on both halves.
"""
import os
import pathlib
import tempfile

import numpy as np

from tests.migrate import test_ddp as T

ROOT = pathlib.Path(__file__).resolve().parents[1]


class _Folders:
    """``tmp_path_factory.mktemp`` for calling the test's fixtures outside pytest."""

    def __init__(self, root):
        self.root = pathlib.Path(root)

    def mktemp(self, name):
        path = self.root / name
        path.mkdir()
        return path


def _gap(got: dict, mapping: dict, want: dict) -> float:
    return max(float(np.abs(got[key] - want[mx][0]).max()) for mx, key in mapping.items() if "running" not in mx)


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        made = T.multi_device.__wrapped__(_Folders(root))
        out, _, mappings = T.md_runs.__wrapped__(made, str(ROOT / ".venv-torch" / "bin" / "python"), _Folders(root))
        final = made["final"]
        for name in ("twin-ddp", "twin-fsdp", "generate-ddp", "generate-fsdp", "twin-ddp-unscaled"):
            mapping, ranks = mappings[name.split("-")[0]], T.rank_weights(out, name)
            means = max(float(np.abs((ranks[0][key] + ranks[1][key]) / 2 - np.mean(final[mx], axis=0)).max())
                        for mx, key in mapping.items() if mx.endswith("running_mean"))
            print(f"{name:<18} vs MXNet {_gap(ranks[0], mapping, final):.2g}  ranks' running mean vs devices' "
                  f"{means:.2g}")
        for model in T.MODELS:
            one = dict(np.load(os.path.join(out, f"{model}-single-rank0.npz")))
            sharded = T.rank_weights(out, f"{model}-fsdp")[0]
            worst = max(float(np.abs(sharded[k] - one[k]).max()) for mx, k in mappings[model].items()
                        if "running" not in mx)
            print(f"{model:<18} FSDP2 vs one process on both halves {worst:.2g}")


if __name__ == "__main__":
    main()
