"""Which nodes ``migrate.verify`` compares on generated zoo models: a table per model.

Run: OMP_NUM_THREADS=2 PYTHONPATH=. python bench/verify_coverage.py [--only REGEX]

For each model (random weights, the small inputs of ``zoo_models``): generate_torch, then ``migrate.verify`` (eval mode,
atol 1e-4) of the generated module with the mapping ``migrate all --torch generate`` uses (its ``MXNET_NAMES``;
``name_mapping`` on code without ``generated_mapping``). "rows" counts the matched nodes, "skipped" those not compared
(besides "packed": the nodes MXNet packs with others, GluonNLP's attention weights, checked at the final output),
"by code" those read from the forward statement that reads a parameter, "not ok" the compared nodes out of tolerance
(random weights), "ok" verify's verdict on the compared nodes and the final outputs, "final diff" the final outputs'
largest difference. It runs on older commits too (docs/migrate/generation.md's table: 742bee0, before the layers;
8fa74db, the layers).
"""
import argparse
import os
import re
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo_models  # noqa: E402 (bench/ is not a package)

warnings.filterwarnings("ignore")

MODELS = ["resnet50_v1", "mobilenetv3_large", "ssd_300_vgg16_atrous_voc", "ssd_512_mobilenet1.0_voc",
          "yolo3_mobilenet1.0_voc", "faster_rcnn_resnet50_v1b_voc", "center_net_resnet18_v1b_voc", "bert_12_768_12"]


def _report(entry):
    import migrate
    try:
        from migrate.source.reading import model_source
    except ImportError:  # before migrate.source
        from migrate.mapping.file_source import model_source
    net, inputs, _ = zoo_models.build(entry)
    shapes, dtypes = [x.shape for x in inputs], [x.dtype for x in inputs]
    with tempfile.TemporaryDirectory() as folder:  # verify reads the forward's statements from the file
        model = migrate.generate_torch(net, shapes, os.path.join(folder, "model.py"), input_dtypes=dtypes)
        try:
            from migrate.mapping.generated_mapping import generated_mapping
            mapping = generated_mapping(model_source(net, shapes, dtypes), model)
        except ImportError:  # before generated_mapping
            mapping = migrate.name_mapping(net, model, shapes, input_dtypes=dtypes)
        return migrate.verify(net, model, mapping, shapes, input_dtypes=dtypes, atol=1e-4), model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="regex over model names")
    args = parser.parse_args()
    entries = {e.name: e for e in zoo_models.entries()}
    print(f"{'model':<32} {'rows':>5} {'skipped':>8} {'packed':>7} {'by code':>8} {'not ok':>7} {'ok':>6} "
          f"{'final diff':>11}")
    for name in [m for m in MODELS if re.search(args.only, m)]:
        report, model = _report(entries[name])
        keys = set(model.state_dict())
        skipped = [r for r in report.rows if r.max_abs_diff is None and r.note.startswith("skipped")]
        packed = [r for r in skipped if "packs" in r.note]
        by_code = [r for r in report.rows if r.torch_node in keys and r not in skipped]
        not_ok = [r for r in report.rows if not r.ok]
        print(f"{name:<32} {len(report.rows):>5} {len(skipped) - len(packed):>8} {len(packed):>7} {len(by_code):>8} "
              f"{len(not_ok):>7} {str(report.ok):>6} {report.max_abs_diff:>11.3g}", flush=True)
        for row in [r for r in skipped if r not in packed][:3]:
            print(f"    skipped: {row.mx_node} at {row.torch_node} ({row.note})")

if __name__ == "__main__":
    main()
