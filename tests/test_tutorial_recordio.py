"""Tutorial 7 (``tutorials/t07_recordio.py``) runs with --fast, and its outputs hold what its story claims.

(Kept beside tests/test_tutorials.py, which runs tutorials 1-6 the same way.)
"""
import json
import re

import pytest

from tutorials import t07_recordio


class TestT07RecordIO:
    def test_training_continues_on_the_rec(self, tmp_path, capsys):
        """torch's batches from RecordDataset equal ImageRecordIter's (pixels and labels exactly); the first torch loss
        within 1e-5 of MXNet's (relative; measured 5.8e-7), the others within 1e-4 (measured 2.3e-6); a shuffled
        epoch with 2 workers reads all 96 records with their labels; the losses fall."""
        assert t07_recordio.main(["--fast", "--out", str(tmp_path)]) == 0
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert (summary["steps"], summary["batches"]) == (3, 3)
        assert summary["pixel_gap"] == 0 and summary["labels_equal"] and summary["shuffled_epoch_labels"]
        assert summary["first_loss_rel_gap"] <= 1e-5 and max(summary["loss_gaps"]) <= 1e-4, summary
        assert summary["mxnet_losses"][-1] < summary["mxnet_losses"][0] / 2
        assert len((tmp_path / "data" / "train.idx").read_text().splitlines()) == 96
        assert "with RecordDataset: pixels within 0 of ImageRecordIter's" in capsys.readouterr().out

    def test_zero_steps_is_a_usage_error(self, tmp_path, capsys):
        """--steps 0 stops with exit code 2 naming the value."""
        with pytest.raises(SystemExit) as exc:
            t07_recordio.main(["--steps", "0", "--out", str(tmp_path)])
        assert exc.value.code == 2 and re.search(r"--steps must be >= 1, got 0", capsys.readouterr().err)
