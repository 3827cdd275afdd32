"""Generated torch modules on a GPU: each module ``generate_torch`` writes for a zoo model runs on CUDA as on the CPU.

Here (./.venv, MXNet): ``python -m devtools.generated_on_device prepare build/generated_cases`` writes, per model of
``MODELS``, the generated ``model.py`` and the input it was generated for (no weights: the files must travel light).
There (a GPU machine, torch only): ``python -m devtools.generated_on_device run build/generated_cases`` gives each
module seeded weights (``seeded_state``), runs it in eval mode on the CPU and on CUDA (float32, TF32 off) and prints
one table: the largest difference between the two runs over ``max(1, largest |CPU output|)``, whether a backward
pass ran on CUDA, and the error where a run failed. What it catches: a tensor the graph creates on the CPU (zeros,
arange, anchors) meeting the CUDA weights, or a helper that only runs on the CPU. Agreement with MXNet itself is
tested on the CPU (tests/migrate/generate/, docs/zoo_report.md).
"""
import json
import os
import sys
import time

import numpy as np

MODELS = ["resnet18_v1", "mobilenetv3_small", "ssd_512_mobilenet1.0_voc", "yolo3_mobilenet1.0_voc",
          "faster_rcnn_resnet50_v1b_voc", "mask_rcnn_resnet18_v1b_coco", "center_net_resnet18_v1b_voc",
          "fcn_resnet50_voc", "fastscnn_citys", "simple_pose_resnet18_v1b", "i3d_resnet50_v1_kinetics400",
          "bert_12_768_12", "transformer_en_de_512 (decoder)"]


def prepare(out: str) -> None:
    """Generate each model's module and save its input (needs MXNet and the zoos: run in ./.venv)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
    import zoo_models

    from migrate import generate_torch
    by_name = {entry.name: entry for entry in zoo_models.entries()}
    for name in MODELS:
        folder = os.path.join(out, name.split(" ")[0].replace(".", "_"))
        os.makedirs(folder, exist_ok=True)
        net, inputs, _ = zoo_models.build(by_name[name])
        generate_torch(net, [x.shape for x in inputs], os.path.join(folder, "model.py"),
                       input_dtypes=[x.dtype for x in inputs])
        np.savez(os.path.join(folder, "inputs.npz"), *inputs)
        with open(os.path.join(folder, "case.json"), "w") as handle:
            json.dump({"name": name}, handle)
        print(f"{name}: {os.path.getsize(os.path.join(folder, 'model.py')) // 1024} KiB")


def seeded_state(model, seed: int = 0) -> dict:
    """Weights for ``model``: normal / sqrt(fan-in) for weights, BatchNorm-like scales and variances in [0.5, 1.5],
    shifts, means and biases in [-0.2, 0.2] (by the MXNet name of each entry); integer buffers kept."""
    import torch
    generator = torch.Generator().manual_seed(seed)
    names = {key: mx_name for mx_name, key in type(model).MXNET_NAMES.items()}
    state = {}
    for key, value in model.state_dict().items():
        if not value.is_floating_point():
            state[key] = value
        elif names.get(key, key).endswith(("gamma", "running_var", "moving_var", "var")):
            state[key] = torch.rand(value.shape, generator=generator, dtype=value.dtype) + 0.5
        elif value.dim() < 2:
            state[key] = (torch.rand(value.shape, generator=generator, dtype=value.dtype) - 0.5) * 0.4
        else:
            fan_in = max(1, value[0].numel())
            state[key] = torch.randn(value.shape, generator=generator, dtype=value.dtype) / fan_in ** 0.5
    return state


def _flat(out) -> list:
    if isinstance(out, (list, tuple)):
        return [leaf for item in out for leaf in _flat(item)]
    return [out]


def _run_case(folder: str) -> dict:
    import importlib.util

    import torch
    spec = importlib.util.spec_from_file_location(f"generated_{os.path.basename(folder)}",
                                                  os.path.join(folder, "model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    classes = [v for v in vars(module).values() if isinstance(v, type) and hasattr(v, "MXNET_NAMES")
               and v.__module__ == module.__name__ and v.__name__ != "_Node"]
    model = classes[0]()
    model.load_state_dict(seeded_state(model))
    arrays = np.load(os.path.join(folder, "inputs.npz"))
    inputs = [torch.from_numpy(arrays[f"arr_{i}"]) for i in range(len(arrays.files))]
    start = time.perf_counter()
    with torch.no_grad():
        want = [o.float() for o in _flat(model.eval()(*inputs))]
    cpu_s = time.perf_counter() - start
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # CPU: a dry run of this script
    model = model.to(device)
    cuda_inputs = [x.to(device) for x in inputs]
    start = time.perf_counter()
    with torch.no_grad():
        got = [o.float().cpu() for o in _flat(model(*cuda_inputs))]
    if device.type == "cuda":
        torch.cuda.synchronize()
    cuda_s = time.perf_counter() - start
    scale = max([1.0] + [float(w.abs().max()) for w in want if w.numel()])
    diff = max(float((w - g).abs().max()) if w.numel() else 0.0 for w, g in zip(want, got))
    outputs = [o for o in _flat(model(*cuda_inputs)) if o.is_floating_point() and o.requires_grad]
    backward = bool(outputs)
    if outputs:
        sum(o.sum() for o in outputs).backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        backward = bool(grads) and all(bool(torch.isfinite(g).all()) for g in grads)
    return {"relative": diff / scale, "outputs": len(want), "backward": backward, "cpu_s": cpu_s, "cuda_s": cuda_s}


def run(out: str) -> int:
    """Each case on the CPU and on CUDA; the table; exit 1 if any case failed to run on CUDA."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"torch {torch.__version__}, numpy {np.__version__}, Python {sys.version.split()[0]}, "
          f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU: CPU twice (a dry run)'}")
    print(f"{'model':34} {'outputs':>7} {'cuda vs cpu':>12} {'backward':>8} {'cpu s':>6} {'cuda s':>6}")
    failed = 0
    for folder in sorted(os.listdir(out)):
        path = os.path.join(out, folder)
        name = json.load(open(os.path.join(path, "case.json")))["name"]
        try:
            row = _run_case(path)
        except Exception as exc:  # a case that fails is a row of the table, with its error
            failed += 1
            print(f"{name:34} FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:150]}")
            continue
        print(f"{name:34} {row['outputs']:>7} {row['relative']:>12.2e} {str(row['backward']):>8} "
              f"{row['cpu_s']:>6.2f} {row['cuda_s']:>6.2f}")
    print(f"mxnet imported: {'mxnet' in sys.modules}")
    return 1 if failed else 0


if __name__ == "__main__":
    command, folder = sys.argv[1], sys.argv[2]
    sys.exit(prepare(folder) if command == "prepare" else run(folder))
