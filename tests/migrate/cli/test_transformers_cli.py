"""GluonNLP BERT files (small, random init) against transformers' BertModel through `migrate map` and `migrate all`:
every matched node verified, the query/key/value GluonNLP packs into one FullyConnected included, and exit 0."""
import json

import mxnet as mx
import numpy as np
import pytest

from migrate.cli import main

bert_pairs = pytest.importorskip("tests.migrate.mapping.test_transformers")  # skips where gluonnlp/transformers miss

TWIN = "tests.migrate.mapping.test_transformers:_hf_bert"
SHAPES = ["--input-shape", "2,8:int64", "--input-shape", "2,8:int64"]


@pytest.fixture(scope="module")
def bert_files(tmp_path_factory):
    """The exported BERT (2 layers) and the settings LrTrainer wrote for it."""
    from gluon_lr import LrTrainer
    folder = tmp_path_factory.mktemp("bert")
    net = bert_pairs._gluon_bert()
    net.hybridize()
    tokens = np.random.RandomState(0).randint(0, bert_pairs.VOCAB, bert_pairs.SHAPES[0])
    net(mx.nd.array(tokens), mx.nd.zeros(bert_pairs.SHAPES[1]))
    net.export(str(folder / "bert"))
    LrTrainer(net, "adam", {"learning_rate": 1e-4}, kvstore=None).export_settings(str(folder / "settings.json"))
    return folder


def _files(folder, *names):
    paths = {"symbol": "bert-symbol.json", "params": "bert-0000.params", "settings": "settings.json"}
    return [x for name in names for x in (f"--{name}", str(folder / paths[name]))]


def _assert_every_node_verified(doc):
    rows = doc["verify"]["rows"]
    assert doc["verify"]["skipped"] == [] and doc["verify"]["nodes"] == len(rows) == 3 + 1 + 11 * 2 + 1
    assert doc["checks"]["verified"] is True
    assert all(not r["skipped"] and r["max_abs_diff"] <= 1e-5 * max(1.0, r["scale"]) for r in rows)
    packed = [r for r in rows if "dotproductselfattentioncell0_reshape" in r["mx_node"]]
    assert len(packed) == 12 and {r["torch_node"].rsplit(".", 1)[1] for r in packed} == {"query", "key", "value"}


class TestBertThroughTheCommandLine:
    def test_map_exits_0_every_node_verified(self, bert_files, tmp_path, capsys):
        """`migrate map`: 39 tensors mapped, 27 nodes compared, none skipped, exit 0 (was 12 skipped, exit 1)."""
        code = main(["map", *_files(bert_files, "symbol", "params"), "--torch", TWIN, *SHAPES,
                     "--out", str(tmp_path / "mapping.json"), "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert code == 0 and doc["exit_code"] == 0 and doc["ok"] is True, doc.get("error")
        assert len(doc["mapping"]["entries"]) == 39
        _assert_every_node_verified(doc)

    def test_all_exits_0_every_node_verified(self, bert_files, tmp_path, capsys):
        """`migrate all`: the folder written, every node verified, exit 0."""
        out = tmp_path / "out"
        code = main(["all", *_files(bert_files, "symbol", "params", "settings"), "--torch", TWIN, *SHAPES,
                     "--out", str(out), "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert code == 0 and doc["ok"] is True, doc.get("error")
        assert "migrate all: OK (exit 0)" in (out / "report.txt").read_text()
        _assert_every_node_verified(doc)
