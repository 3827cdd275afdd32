"""The torch side on another machine (a GPU machine with its own Python, numpy and torch, no MXNet): MXNet runs are
made here, continued there on the CPU and on the GPU, and compared with MXNet's own next steps.

Here (./.venv, MXNet): ``python -m devtools.torch_side_on_device prepare build/device_cases`` writes, for the 19 exact
optimizers (R's MLP, float32) and for the BatchNorm + depthwise net of ``tests/test_torch_env.py`` (``migrate all``
with the torch twin and with ``--torch generate``), the files the torch side reads and MXNet's weights after its next
steps. There (no MXNet): ``python -m devtools.torch_side_on_device run build/device_cases`` continues each run with
``tests.torch_side.worker`` on ``cpu`` and on ``cuda`` (float32, no TF32) and prints one table: the largest difference
to MXNet per case and device (nan where the case failed; its error is printed below the table), and whether mxnet
was imported (it must not be).
"""
import json
import os
import subprocess
import sys

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def prepare(out: str) -> None:
    """MXNet runs and their files (needs MXNet: run in ./.venv)."""
    import pathlib

    from tests import test_torch_env as T

    os.makedirs(out, exist_ok=True)
    cases = []
    for case, name, kwargs, options in T.CASES:
        made = T._optimizer_case(os.path.join(out, case), case, name, kwargs, options, "float32")
        np.savez(os.path.join(made["folder"], "final.npz"), **made.pop("final"))
        cases.append(made)

    class _Folders:
        def mktemp(self, name):
            path = pathlib.Path(out) / name
            path.mkdir()
            return path
    trained = T.trained_bn_depthwise.__wrapped__(_Folders())
    np.savez(trained["folder"] / "final.npz", **trained["final"])
    for model in ("twin", "generate"):
        folder = trained["folder"] / f"out-{model}"
        flag = "generate" if model == "generate" else "tests.torch_side.models:bn_depthwise_net"
        done = T._run(sys.executable, "-m", "migrate", "all", "--symbol", str(trained["folder"] / "bndw-symbol.json"),
                      "--params", str(trained["folder"] / "bndw-0000.params"), "--settings",
                      str(trained["folder"] / "settings.json"), "--states", str(trained["folder"] / "trainer.states"),
                      "--torch", flag, "--input-shape", "1,3,8,8", "--out", str(folder))
        assert done.returncode == 0, done.stderr[-2000:]
        cases.append({"kind": "migration", "folder": str(folder), "model": model, "class": "Bndw",
                      "data": str(trained["folder"] / "data.npz"), "steps": T.STEPS, "case": f"bndw-{model}",
                      "final": str(trained["folder"] / "final.npz")})
    for case in cases:  # paths relative to the repository root, so the folder can travel
        case["folder"] = os.path.relpath(case["folder"], _ROOT)
        for key in ("data", "final"):
            if key in case:
                case[key] = os.path.relpath(case[key], _ROOT)
    with open(os.path.join(out, "cases.json"), "w") as handle:
        json.dump(cases, handle)


def run(out: str) -> int:
    """Continue every case on each device there is, and print the table (no MXNet needed)."""
    import torch

    with open(os.path.join(out, "cases.json")) as handle:
        cases = json.load(handle)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    summaries, rows = {}, []
    for device in devices:
        job = [dict(c, device=device, tag=device, keep_going=True) for c in cases]
        job_path = os.path.join(out, f"job-{device}.json")
        with open(job_path, "w") as handle:
            json.dump(job, handle)
        done = subprocess.run([sys.executable, "-m", "tests.torch_side.worker", job_path], capture_output=True,
                              text=True, cwd=_ROOT, env=dict(os.environ, PYTHONPATH=_ROOT))
        if done.returncode != 0:
            print(f"{device}: the worker failed\n{done.stderr[-4000:]}")
            return 1
        summaries[device] = json.loads(done.stdout.strip().splitlines()[-1])
    for case in cases:
        final = np.load(case.get("final") or os.path.join(case["folder"], "final.npz"))
        worst = []
        for device in devices:
            if case["case"] in summaries[device]["errors"]:
                worst.append(float("nan"))
                continue
            result = np.load(os.path.join(case["folder"], f"result-{device}.npz"))
            prefix = "exact/" if case["kind"] == "optimizer" else ""
            worst.append(max(float(np.abs(result[prefix + n] - final[n]).max()) for n in final.files
                             if prefix + n in result.files))
        rows.append((case["case"], *worst))
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, torch {torch.__version__}, devices {devices}; "
          f"mxnet imported: {[s['mxnet_imported'] for s in summaries.values()]}")
    print(f"{'case':<20}" + "".join(f"{'max |torch - MXNet| ' + d:>26}" for d in devices))
    for row in rows:
        print(f"{row[0]:<20}" + "".join(f"{v:>26.3g}" for v in row[1:]))
    for device in devices:
        for case, error in summaries[device]["errors"].items():
            print(f"{device} {case}: {error}")
    return 1 if any(s["mxnet_imported"] or s["errors"] for s in summaries.values()) else 0


if __name__ == "__main__":
    command, folder = sys.argv[1], sys.argv[2]
    sys.exit(prepare(folder) if command == "prepare" else run(folder))
