"""NameMapping: versioned JSON save/load, the printed table, errors on bad files and names."""
import json
import os

import numpy as np
import pytest

from migrate import NameMapping
from migrate.errors import InputFileError, MappingError, MappingKeyError, WeightShapeError


class TestSaveLoad:
    """NameMapping.save / NameMapping.load."""

    def test_round_trip(self, pair, tmp_path):
        """A saved mapping loads back equal: names, transforms, folds, defaults, and it converts the same."""
        mapping = pair("depthwise-bias-fold-1x1-vs-linear")[-1]
        path = tmp_path / "mapping.json"
        mapping.save(path)
        loaded = NameMapping.load(path)
        assert dict(loaded) == dict(mapping) and loaded.ok
        assert loaded.torch_defaults == mapping.torch_defaults
        assert [loaded.transform(k) for k in loaded] == [mapping.transform(k) for k in mapping]
        w = np.random.default_rng(0).standard_normal((3, 10, 1, 1)).astype(np.float32)
        np.testing.assert_array_equal(loaded.to_torch("head_weight", w), mapping.to_torch("head_weight", w))
        assert os.listdir(tmp_path) == ["mapping.json"], "a temporary file was left behind"
        doc = json.loads(path.read_text())
        assert (doc["format"], doc["schema_version"]) == ("gluon-lr-name-mapping", 1)

    def test_saved_file_is_readable_by_others(self, pair, tmp_path):
        """The saved file gets the usual mode (0666 minus the umask), not the temp file's 0600: other ranks read it."""
        umask = os.umask(0o022)
        try:
            pair("depthwise-bias-fold-1x1-vs-linear")[-1].save(tmp_path / "m.json")
        finally:
            os.umask(umask)
        assert oct(os.stat(tmp_path / "m.json").st_mode & 0o777) == oct(0o644)

    def test_not_equivalent_round_trip(self, pair, tmp_path):
        """Unmatched names and differences survive the file."""
        mapping = pair("extra-layer")[-1]
        mapping.save(tmp_path / "m.json")
        loaded = NameMapping.load(tmp_path / "m.json")
        assert not loaded.ok
        assert loaded.unmatched_torch == mapping.unmatched_torch and loaded.differences == mapping.differences

    def test_table(self, pair):
        """str() is a table naming both sides and the verdict."""
        text = str(pair("residual-body-first")[-1])
        assert "body1_weight" in text and "conv1.weight" in text
        assert text.splitlines()[0].split() == ["MXNet", "torch", "transform"]
        assert "22 mapped, 0 unmatched MXNet, 0 unmatched torch, 0 differences: OK" in text


def _write(tmp_path, text):
    path = tmp_path / "m.json"
    path.write_text(text)
    return path


LOAD_ERRORS = [
    ("missing file", None, InputFileError, "not found"),
    ("not JSON", "{nope", InputFileError, "could not parse"),
    ("another format", '{"format": "gluon-lr-settings", "schema_version": 1}', MappingError,
     "expected a JSON object with format 'gluon-lr-name-mapping'"),
    ("future schema", '{"format": "gluon-lr-name-mapping", "schema_version": 9}', MappingError,
     "schema_version 9 is not supported"),
    ("truncated", '{"format": "gluon-lr-name-mapping", "schema_version": 1, "entries": [{"torch": "a"}]}',
     MappingError, "a required field is missing or malformed"),
]


@pytest.mark.parametrize("desc,text,error,pattern", LOAD_ERRORS, ids=[e[0] for e in LOAD_ERRORS])
def test_load_errors(tmp_path, desc, text, error, pattern):
    """Bad mapping files raise migrate errors naming the file and what to do."""
    path = tmp_path / "absent.json" if text is None else _write(tmp_path, text)
    with pytest.raises(error, match=pattern):
        NameMapping.load(path)


def test_name_errors(pair):
    """Unknown names and wrong shapes raise errors naming them."""
    mapping = pair("residual-body-first")[-1]
    with pytest.raises(MappingKeyError, match="'nope' is not in this mapping"):
        mapping["nope"]
    with pytest.raises(MappingKeyError, match="torch key 'nope.weight': no MXNet parameter maps to it"):
        mapping.to_mxnet("nope.weight", np.zeros(3))
    with pytest.raises(WeightShapeError, match=r"'fc_weight': expected shape \(5, 8\).*received \(8, 5\)"):
        mapping.to_torch("fc_weight", np.zeros((8, 5)))
