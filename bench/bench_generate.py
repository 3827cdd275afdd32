"""Benchmark of generate_torch: generation time and source length per model, against MXNet's own export.

Run: OMP_NUM_THREADS=2 PYTHONPATH=. python bench/bench_generate.py [--repeat 3] [--only REGEX]

For one model per family of the GluonCV/GluonNLP zoos (random weights, the small inputs of ``zoo_models``):
"generate" is generate_torch end to end (symbol and shape inference, translation, writing and importing the file,
loading the weights), best of --repeat runs; "export" is MXNet's ``HybridBlock.export`` of the same block (symbol
JSON and params file), best of as many runs, as a yardstick for the cost of reading a model at all; "ratio" is
generate / export; "lines" and "KiB" measure the generated file; "ops" counts the lines of its forward (one per
graph node); "layers" the torch layers its ``__init__`` builds; "helpers" the helper functions and layer classes
copied into it.
"""
import argparse
import os
import re
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo_models  # noqa: E402 (bench/ is not a package)

warnings.filterwarnings("ignore")

MODELS = ["resnet50_v1", "mobilenetv2_1.0", "xception", "nasnet_4_1056", "hrnet_w18_small_v1_c",
          "ssd_300_vgg16_atrous_voc", "yolo3_darknet53_voc", "faster_rcnn_resnet50_v1b_voc",
          "center_net_resnet18_v1b_voc", "fcn_resnet50_voc", "deeplab_resnet50_ade", "simple_pose_resnet50_v1b",
          "i3d_resnet50_v1_kinetics400", "bert_12_768_12", "transformer_en_de_512 (decoder)"]


def _best(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _measure(entry, repeat) -> dict:
    from migrate.generate import generate_torch
    net, inputs, _ = zoo_models.build(entry)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.py")
        shapes, dtypes = [x.shape for x in inputs], [x.dtype for x in inputs]
        generate = _best(lambda: generate_torch(net, shapes, path, input_dtypes=dtypes), repeat)
        source = open(path).read()
        net.hybridize()
        import mxnet as mx
        net(*[mx.nd.array(x) for x in inputs])
        export = _best(lambda: net.export(os.path.join(folder, "mx")), repeat)
    body = source[source.rindex("    def forward("):source.rindex("    MXNET_NAMES = {")]  # the model class: last
    init = source[source.rindex("    def __init__(self):"):source.rindex("    def forward(")]
    return {"generate": generate, "export": export, "lines": len(source.splitlines()), "kib": len(source) / 1024,
            "ops": len([line for line in body.splitlines()[1:] if " = " in line]),
            "layers": len(re.findall(r"\bnn\.[A-Z]\w*\(|\b(?:BatchNorm|LayerNorm|InstanceNorm|GroupNorm|PReLU|Clip)\(",
                                     init)),
            "helpers": len(re.findall(r"^(?:def|class) ", source, re.M)) - 1}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default=None, help="regex: only models whose name matches")
    args = parser.parse_args(argv)
    wanted = [m for m in MODELS if args.only is None or re.search(args.only, m)]
    by_name = {e.name: e for e in zoo_models.entries()}
    print(f"{'model':34} {'generate s':>10} {'export s':>9} {'ratio':>6} {'lines':>6} {'KiB':>6} {'ops':>5} "
          f"{'layers':>6} {'helpers':>7}")
    for name in wanted:
        r = _measure(by_name[name], args.repeat)
        print(f"{name:34} {r['generate']:10.2f} {r['export']:9.2f} {r['generate'] / r['export']:6.1f} "
              f"{r['lines']:6d} {r['kib']:6.0f} {r['ops']:5d} {r['layers']:6d} {r['helpers']:7d}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
