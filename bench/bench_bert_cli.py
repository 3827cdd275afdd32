"""GluonNLP BERT-base (bert_12_768_12, random weights) files against transformers' BertModel through the command line.

Run: OMP_NUM_THREADS=2 PYTHONPATH=. python bench/bench_bert_cli.py [--base PATH] [--seq N]

Builds ``bert_12_768_12`` (``dataset_name=None``, ``pretrained=False``, the 30522-token vocabulary of BERT's
uncased English one, pooler on, no decoder or classifier) with random weights, exports it, writes LrTrainer's
settings for it (adam), and runs ``python -m migrate map`` and ``python -m migrate all --json`` against
``bert_base_twin`` (``transformers.BertModel`` of the same configuration, called as GluonNLP's model is: token ids
and token types -> sequence and pooled outputs). Prints one row per command: exit code, tensors mapped, unmatched
names, nodes verified, nodes skipped, the largest difference of the final outputs and of any node, and the time.
``--base PATH`` runs the same commands with another checkout's ``migrate`` (``PATH`` first on PYTHONPATH), e.g. the
commit before packed query/key/value nodes were compared, for a before/after table in one run; ``--without-mxnet``
adds the rows of this checkout reading the files without MXNet (``MIGRATE_WITHOUT_MXNET=1``: verification against
the graph's torch translation).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 30522


def bert_base_twin():
    """transformers' BertModel of bert_12_768_12's configuration, called as GluonNLP's BERTModel is."""
    import torch
    import transformers
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                     intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=1e-12)

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = transformers.BertModel(config, add_pooling_layer=True)

        def forward(self, ids, types):
            out = self.bert(input_ids=ids, token_type_ids=types)
            return out.last_hidden_state, out.pooler_output

    torch.manual_seed(0)
    return Bert()


def _export(folder: str, seq: int) -> None:
    """bert_12_768_12 with random weights exported to folder/bert-*, and LrTrainer's settings for it."""
    import gluonnlp as nlp
    import mxnet as mx

    from gluon_lr import LrTrainer
    vocab = nlp.Vocab({f"w{i}": 1 for i in range(VOCAB - 4)})
    net = nlp.model.get_model("bert_12_768_12", dataset_name=None, pretrained=False, vocab=vocab, use_pooler=True,
                              use_decoder=False, use_classifier=False)[0]
    assert len(vocab) == VOCAB, len(vocab)
    mx.random.seed(0)
    net.initialize(mx.init.Normal(0.02))
    net.hybridize()
    net(mx.nd.zeros((1, seq)), mx.nd.zeros((1, seq)))
    net.export(os.path.join(folder, "bert"))
    LrTrainer(net, "adam", {"learning_rate": 1e-4}, kvstore=None).export_settings(os.path.join(folder, "settings.json"))


def _run(command: str, folder: str, seq: int, base: str | None, without_mxnet: bool = False) -> dict:
    """One CLI command: its JSON document, exit code and seconds."""
    flags = ["--symbol", f"{folder}/bert-symbol.json", "--params", f"{folder}/bert-0000.params",
             "--torch", "bench.bench_bert_cli:bert_base_twin", "--input-shape", f"1,{seq}:int64",
             "--input-shape", f"1,{seq}:int64", "--json", "--quiet"]
    out = f"{folder}/{command}-{'base' if base else 'now'}{'-files' if without_mxnet else ''}"
    flags += ["--settings", f"{folder}/settings.json", "--out", out] if command == "all" else ["--out", out + ".json"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (base, ROOT) if p), "OMP_NUM_THREADS": "2",
           "MIGRATE_WITHOUT_MXNET": "1" if without_mxnet else "0"}
    start = time.perf_counter()  # `python -m` puts its folder first: the base checkout's migrate runs from there
    done = subprocess.run([sys.executable, "-m", "migrate", command, *flags], capture_output=True, text=True,
                          env=env, cwd=base or ROOT)
    seconds = time.perf_counter() - start
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"migrate {command} printed no JSON (exit {done.returncode}): {done.stderr[-2000:]}")
    return {"doc": doc, "code": done.returncode, "seconds": seconds}


def _row(label: str, command: str, result: dict) -> str:
    doc, verify = result["doc"], result["doc"].get("verify", {})
    mapping = doc.get("mapping", {})
    unmatched = len(doc.get("unmapped", {}).get("mxnet", [])) + len(doc.get("unmapped", {}).get("torch", []))
    rows = verify.get("rows", [])
    worst = max((r["max_abs_diff"] for r in rows if r["max_abs_diff"] is not None), default=float("nan"))
    return (f"| {label} | migrate {command} | {result['code']} | {len(mapping.get('entries', {}))} | {unmatched} | "
            f"{len(rows) - len(verify.get('skipped', []))} of {len(rows)} | {len(verify.get('skipped', []))} | "
            f"{verify.get('max_abs_diff', float('nan')):.2g} | {worst:.2g} | {result['seconds']:.0f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="another checkout whose migrate runs the same commands first")
    parser.add_argument("--seq", type=int, default=32, help="tokens per sequence (batch 1)")
    parser.add_argument("--without-mxnet", action="store_true", help="also read the files without MXNet")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        _export(folder, args.seq)
        print(f"bert_12_768_12 vs BertModel, input (1, {args.seq}) int64 x 2, float32, CPU")
        print("| code | command | exit | mapped | unmatched | verified nodes | skipped | final diff | worst node diff "
              "| time |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        runs = ([("base", args.base, False)] if args.base else []) + [("this checkout", None, False)]
        runs += [("this checkout, without MXNet", None, True)] if args.without_mxnet else []
        for label, base, without in runs:
            for command in ("map", "all"):
                print(_row(label, command, _run(command, folder, args.seq, base, without)), flush=True)


if __name__ == "__main__":
    main()
