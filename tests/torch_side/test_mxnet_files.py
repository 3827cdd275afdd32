"""MXNet's files read without MXNet (mxformats.ndarray, mxformats.symbol, mxformats.states, convert_weights of a
.params path), on bytes written by hand from MXNet's code (``ndarray_bytes``): every version and dtype, one copy of
the values at most, damage of every kind a typed error naming the file and the byte offset, and no allocation bigger
than the file. ``tests/mxformats`` checks the same readers against MXNet's own loaders; these run in ./.venv-torch too.
"""
import json
import os
import random
import struct
import tracemalloc

import numpy as np
import pytest
import torch

import migrate
from migrate.errors import InputFileError
from migrate.mapping.table import NameMapping
from mxformats.errors import MXNetFileError, StatesFileError, SymbolFileError
from mxformats.ndarray import index_ndarrays, load_ndarrays
from mxformats.states import unpickle_states
from mxformats.symbol import symbol_from_json
from tests.mxformats import hostile_states as H
from tests.torch_side import ndarray_bytes as B
from tests.torch_side.test_without_mxnet import _child, _pickled_states

KIB = 1024


def _mixed_file(rng) -> tuple:
    """(file bytes, arrays): one array per dtype, the four versions in turn, 0-d where the version has them."""
    arrays, records = {}, []
    for i, dtype in enumerate(B.DTYPES):
        version = B.VERSIONS[i % 4]
        shape = () if version in ("legacy", "v1") and i < 4 else (2, 3) if i % 2 else (4,)
        arrays[f"arg:{dtype}_{version}"] = B.random_array(dtype, shape, rng)
        records.append(B.array_bytes(arrays[f"arg:{dtype}_{version}"], version))
    return B.list_bytes(records, list(arrays)), arrays


def _same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


class TestNDArrayFiles:
    @pytest.mark.parametrize("version", B.VERSIONS)
    def test_every_dtype_reads_back(self, tmp_path, version):
        """Each dtype in each version (and 0-d arrays where the version has them) reads back bit for bit, named and
        unnamed; a version-2 ndim-0 record is MXNet's empty "none" array (None)."""
        rng = np.random.RandomState(B.VERSIONS.index(version))
        shapes = [(3, 4), (5,), (2, 0)] + ([()] if version != "v2" else [])
        arrays = {f"{dtype}{i}": B.random_array(dtype, shape, rng) for dtype in B.DTYPES
                  for i, shape in enumerate(shapes)}
        records = [B.array_bytes(a, version) for a in arrays.values()]
        (tmp_path / "named.params").write_bytes(B.list_bytes(records, list(arrays)))
        (tmp_path / "list.params").write_bytes(B.list_bytes(records + [struct.pack("<Iii", B.V2_MAGIC, 0, 0)]))
        named, unnamed = load_ndarrays(tmp_path / "named.params"), load_ndarrays(tmp_path / "list.params")
        assert list(named) == list(arrays) and all(_same(named[k], v) for k, v in arrays.items())
        assert all(_same(a, b) for a, b in zip(unnamed, arrays.values())) and unnamed[-1] is None
        assert len(unnamed) == len(arrays) + 1

    def test_index_reads_one_array_when_asked(self, tmp_path):
        """index_ndarrays reads headers only: shapes, dtypes and offsets; each array is read on its own, and a file
        that changed size since is refused."""
        data, arrays = _mixed_file(np.random.RandomState(0))
        path = tmp_path / "mixed.params"
        path.write_bytes(data)
        index = index_ndarrays(path)
        assert list(index) == list(arrays) and index.named
        for name, value in arrays.items():
            info = index.info(name)
            assert (info.shape, info.dtype, info.nbytes) == (value.shape, value.dtype, value.nbytes)
            assert data[info.offset:info.offset + info.nbytes] == value.tobytes()
        assert _same(index["arg:int8_v1"], arrays["arg:int8_v1"])
        path.write_bytes(data + b"\0")
        with pytest.raises(MXNetFileError, match=r"is \d+ bytes now, \d+ when it was indexed"):
            index.read()

    def test_sparse_arrays_are_named(self, tmp_path):
        """A row_sparse array among dense ones is read past and refused by name, with where it starts."""
        dense = B.array_bytes(np.ones((2, 2), np.float32))
        sparse = B.row_sparse_bytes(np.arange(6, dtype=np.float32).reshape(2, 3), np.array([0, 4]), (5, 3))
        (tmp_path / "s.params").write_bytes(B.list_bytes([dense, sparse, dense], ["w", "emb", "v"]))
        with pytest.raises(MXNetFileError, match=r"'emb' \(a row_sparse sparse array at byte 80\): only dense arrays"):
            load_ndarrays(tmp_path / "s.params")

    def test_every_truncation_is_a_typed_error(self, tmp_path):
        """Every cut of a file holding all versions and dtypes: MXNetFileError naming the file and an offset within
        the cut."""
        data, _ = _mixed_file(np.random.RandomState(1))
        path = tmp_path / "cut.params"
        for cut in range(len(data)):
            path.write_bytes(data[:cut])
            with pytest.raises(MXNetFileError, match=r"cut\.params'?: ") as caught:
                load_ndarrays(path)
            offset = int(str(caught.value).split(" at byte ")[1].split(";")[0].split(",")[0].split()[0])
            assert offset <= cut, (cut, str(caught.value))

    def test_header_damage_is_typed_and_allocates_nothing_big(self, tmp_path):
        """500 seeded changes of header bytes: MXNetFileError naming the file and the offset, or arrays; never
        another exception, and never more allocated than the file holds (tracemalloc sees numpy's allocations)."""
        data, _ = _mixed_file(np.random.RandomState(2))
        index_path = tmp_path / "clean.params"
        index_path.write_bytes(data)
        index = index_ndarrays(index_path)
        values = {b for k in index for b in range(index.info(k).offset, index.info(k).offset + index.info(k).nbytes)}
        header = [b for b in range(len(data)) if b not in values]
        picker, path, refused = random.Random(0), tmp_path / "damaged.params", 0
        tracemalloc.start()
        try:
            for trial in range(500):
                damaged = bytearray(data)
                damaged[picker.choice(header)] ^= (1 << picker.randrange(8)) if trial % 2 else picker.randrange(1, 256)
                path.write_bytes(bytes(damaged))
                tracemalloc.reset_peak()
                try:
                    load_ndarrays(path)
                except MXNetFileError as exc:
                    assert "damaged.params" in str(exc) and " at byte " in str(exc), exc
                    refused += 1
                assert tracemalloc.get_traced_memory()[1] < len(data) + 64 * KIB, trial
        finally:
            tracemalloc.stop()
        assert refused >= 300, refused

    @pytest.mark.parametrize("record, pattern", [
        (struct.pack("<Iiiq", B.V2_MAGIC, 0, 1, 2 ** 40) + struct.pack("<iii", 1, 0, 0),
         rf"needs {2 ** 42} bytes but only \d+ are left at byte \d+"),
        (struct.pack("<III", 2, 2 ** 31, 2 ** 31) + struct.pack("<iii", 1, 0, 1),
         r"shape \(2147483648, 2147483648\) of 8-byte items: its dimensions multiply past 2\*\*63 bytes.* at byte 24"),
        (struct.pack("<Iiiq", B.V2_MAGIC, 2, 1, 7) + struct.pack("<iqq", 2, 4, 3) + struct.pack("<iiii", 1, 0, 0, 6)
         + struct.pack("<iqiiq", 1, 5, 6, 1, 2 ** 50), rf"needs {4 * 2 ** 50 + 8 * 5 + 8 * 2 ** 50} bytes but only"),
        (struct.pack("<Iiiqq", B.V2_MAGIC, 0, 2, 0, 2 ** 62) + struct.pack("<iii", 1, 0, 0),
         r"shape \(0, 4611686018427387904\) of 4-byte items: its dimensions multiply past 2\*\*63 bytes"),
    ], ids=["v2 2**40 floats", "legacy 2**62 doubles", "csr of 2**50 values", "v2 (0, 2**62) floats"])
    def test_a_huge_dimension_allocates_nothing(self, tmp_path, record, pattern):
        """A dimension claiming far more than the file (or more than any array holds, even with a zero dimension):
        refused before numpy allocates anything, naming the offset."""
        (tmp_path / "huge.params").write_bytes(B.list_bytes([record + b"\0" * 64], ["x"]))
        tracemalloc.start()
        try:
            with pytest.raises(MXNetFileError, match=pattern):
                load_ndarrays(tmp_path / "huge.params")
            assert tracemalloc.get_traced_memory()[1] < 64 * KIB
        finally:
            tracemalloc.stop()

    def test_special_and_missing_files(self, tmp_path):
        """A FIFO (which would block), a folder and a missing file: refused at once, naming the path."""
        os.mkfifo(tmp_path / "pipe.params")
        for path, pattern in ((tmp_path / "pipe.params", "a FIFO"), (tmp_path, "a folder"),
                              (tmp_path / "absent.params", "No such file")):
            with pytest.raises(MXNetFileError, match=pattern):
                load_ndarrays(path)

    def test_reading_holds_one_copy(self, tmp_path):
        """Reading a 16 MiB file allocates the arrays once (no second copy of the file); reading one array at a time
        from the index holds that array only."""
        rng = np.random.RandomState(3)
        arrays = {f"w{i}": rng.randn(512, 1024).astype(np.float32) for i in range(8)}
        (tmp_path / "big.params").write_bytes(B.list_bytes([B.array_bytes(a) for a in arrays.values()], list(arrays)))
        size = os.path.getsize(tmp_path / "big.params")
        del arrays
        tracemalloc.start()
        try:
            loaded = load_ndarrays(tmp_path / "big.params")
            whole = tracemalloc.get_traced_memory()[1]
            del loaded
            tracemalloc.reset_peak()
            index = index_ndarrays(tmp_path / "big.params")
            for name in index:
                assert index[name].shape == (512, 1024)
            one = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert size <= whole < size + 64 * KIB and 2 * KIB * KIB <= one < 2 * KIB * KIB + 64 * KIB, (whole, one)


def _linear_mapping() -> tuple:
    """A two-layer torch MLP, its NameMapping from MXNet's names (arg:/aux: in the file), and MXNet's values."""
    rng = np.random.RandomState(4)
    values = {"fc1_weight": rng.randn(8, 5), "fc1_bias": rng.randn(8), "fc2_weight": rng.randn(3, 8),
              "fc2_bias": rng.randn(3)}
    values = {name: value.astype(np.float32) for name, value in values.items()}
    keys = {"fc1_weight": "0.weight", "fc1_bias": "0.bias", "fc2_weight": "2.weight", "fc2_bias": "2.bias"}
    mapping = NameMapping({name: {"torch": keys[name], "mx_shape": list(v.shape), "torch_shape": list(v.shape),
                                  "steps": []} for name, v in values.items()})
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    return model, mapping, values


class TestConvertWeightsFromFile:
    def test_params_path_converts_without_mxnet(self, tmp_path):
        """convert_weights of a .params path reads it without MXNet: the torch values are the file's, bit for bit;
        mxnet is not imported (a child process where importing it fails)."""
        model, mapping, values = _linear_mapping()
        path = tmp_path / "mlp-0000.params"
        path.write_bytes(B.list_bytes([B.array_bytes(v) for v in values.values()], [f"arg:{k}" for k in values]))
        converted = migrate.convert_weights(str(path), mapping, model)
        for name, key in mapping.items():
            assert converted[key].numpy().tobytes() == values[name].tobytes(), key
        code = ("import sys, migrate\nfrom tests.torch_side.test_mxnet_files import _linear_mapping\n"
                f"model, mapping, _ = _linear_mapping()\nsd = migrate.convert_weights({str(path)!r}, mapping, model)\n"
                "print(len(sd), sys.modules['mxnet'])\n")
        done = _child(code)  # importing mxnet fails there
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["4", "None"]

    def test_params_path_holds_the_result_only(self, tmp_path):
        """Converting a 32 MiB file allocates the result and nothing more than one array beside it."""
        rng = np.random.RandomState(5)
        values = {f"fc{i}_weight": rng.randn(1024, 1024).astype(np.float32) for i in range(8)}
        mapping = NameMapping({name: {"torch": f"{i}.weight", "mx_shape": [1024, 1024], "torch_shape": [1024, 1024],
                                      "steps": []} for i, name in enumerate(values)})
        path = tmp_path / "big.params"
        path.write_bytes(B.list_bytes([B.array_bytes(v) for v in values.values()], list(values)))
        size = os.path.getsize(path)
        del values
        tracemalloc.start()
        try:
            converted = migrate.convert_weights(str(path), mapping)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert len(converted) == 8 and size <= peak < size + 64 * KIB, (size, peak)

    def test_a_callers_arrays_are_never_shared(self):
        """From a dict of numpy arrays, every tensor is a copy of its own, laid out as it is or transposed (one copy,
        no second)."""
        _, mapping, values = _linear_mapping()
        entries = {name: mapping.entry(name) for name in mapping}
        entries["fc2_weight"] = dict(entries["fc2_weight"], torch_shape=[8, 3], steps=[["transpose", [1, 0]]])
        converted = migrate.convert_weights(values, NameMapping(entries))
        for name, key in NameMapping(entries).items():
            assert not np.shares_memory(converted[key].numpy(), values[name]), key
        assert np.array_equal(converted["2.weight"].numpy(), values["fc2_weight"].T)

    @pytest.mark.parametrize("data, pattern", [
        (b"\x12\x01" + b"\0" * 6, r"could not read it \(.*header needs 16 bytes but only 8 are left at byte 0"),
        (B.list_bytes([B.array_bytes(np.ones(2, np.float32))]), "expected named arrays, received a list of 1"),
    ], ids=["truncated", "unnamed"])
    def test_bad_params_files_are_input_errors(self, tmp_path, data, pattern):
        """A damaged or unnamed .params file: InputFileError naming the file (and the byte offset)."""
        model, mapping, _ = _linear_mapping()
        (tmp_path / "bad.params").write_bytes(data)
        with pytest.raises(InputFileError, match=rf"bad\.params.*{pattern}"):
            migrate.convert_weights(str(tmp_path / "bad.params"), mapping, model)


def _old_symbol() -> dict:
    """A symbol as MXNet 0.8 wrote it: no version, ``param``/``attr``, two-number entries, a plain ``lr_mult`` on a
    variable and ``weight_wd_mult`` on an op, a BatchNorm without its moving statistics, argmax with axis -1, and a
    node no head reaches (listed first)."""
    return {"nodes": [
        {"op": "null", "name": "orphan", "inputs": []},
        {"op": "null", "name": "data", "inputs": [], "backward_source_id": -1},
        {"op": "null", "name": "fc_weight", "attr": {"lr_mult": "0.1"}, "inputs": []},
        {"op": "null", "name": "fc_bias", "inputs": []},
        {"op": "FullyConnected", "name": "fc", "param": {"num_hidden": "4", "weight_wd_mult": "0"},
         "inputs": [[1, 0], [2, 0], [3, 0]]},
        {"op": "null", "name": "bn_gamma", "inputs": []}, {"op": "null", "name": "bn_beta", "inputs": []},
        {"op": "BatchNorm", "name": "bn", "param": {"eps": "0.001"}, "attr": {"ctx_group": "dev1"},
         "inputs": [[4, 0], [5, 0], [6, 0]]},
        {"op": "argmax", "name": "pick", "param": {"axis": "-1"}, "inputs": [[7, 0]]}],
        "arg_nodes": [0, 1, 2, 3, 5, 6], "heads": [[8, 0], [7, 0]]}


class TestSymbolWithoutMXNet:
    def test_old_spellings_upgrade_as_mxnet_upgrades_them(self):
        """The 0.8 spellings, checked by hand against MXNet's upgrade rules (legacy_json_util.cc)."""
        graph = symbol_from_json(json.dumps(_old_symbol()))
        names = [node.name for node in graph.nodes]
        assert names == ["data", "fc_weight", "fc_bias", "fc", "bn_gamma", "bn_beta", "bn_moving_mean",
                         "bn_moving_var", "bn", "pick"]
        by_name = dict(zip(names, graph.nodes))
        assert by_name["fc_weight"].attrs == {"__lr_mult__": "0.1", "__wd_mult__": "0"}
        assert by_name["fc"].attrs == {"num_hidden": "4"} and by_name["pick"].attrs == {}
        assert by_name["bn"].attrs == {"__ctx_group__": "dev1", "eps": "0.001"}
        assert by_name["bn_moving_mean"].attrs == {"__ctx_group__": "dev1", "__init__": '["zero", {}]', "eps": "0.001"}
        assert by_name["bn_moving_var"].attrs["__init__"] == '["one", {}]'
        assert by_name["bn"].inputs == ((3, 0), (4, 0), (5, 0), (6, 0), (7, 0))
        assert graph.arg_nodes == (0, 1, 2, 4, 5, 6, 7) and graph.heads == ((9, 0), (8, 0))
        assert graph.mxnet_version == 800

    def test_modern_spelling_is_kept(self):
        """A 1.9.1 file: no upgrade (plain ``lr_mult`` stays, axis -1 stays), three-number entries, attrs sorted."""
        document = _old_symbol()
        document["attrs"] = {"mxnet_version": ["int", 10901]}
        graph = symbol_from_json(json.dumps(document))
        by_name = {node.name: node for node in graph.nodes}
        assert by_name["fc_weight"].attrs == {"lr_mult": "0.1"} and by_name["pick"].attrs == {"axis": "-1"}
        assert "bn_moving_mean" not in by_name and list(by_name["fc"].attrs) == ["num_hidden", "weight_wd_mult"]

    @pytest.mark.parametrize("data, pattern", [
        (b'{"nodes": [', "not JSON"),
        (json.dumps({**_old_symbol(), "attrs": {"mxnet_version": ["int", 20100]}}).encode(),
         r"written by MXNet 2\.1\.0 \(mxnet_version 20100\)"),
        (json.dumps({"nodes": [{"op": "null", "name": "x", "inputs": []}], "arg_nodes": [0], "heads": [[3, 0]]}),
         r"heads\[0\] is 3, not a node index"),
        (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
    ], ids=["not JSON", "MXNet 2.1", "head out of range", "deep nesting"])
    def test_bad_symbols_are_typed_errors(self, tmp_path, data, pattern):
        """Damaged or newer symbol files: SymbolFileError naming the file and what is wrong."""
        from mxformats.symbol import read_symbol
        (tmp_path / "net-symbol.json").write_bytes(data if isinstance(data, bytes) else data.encode())
        with pytest.raises(SymbolFileError, match=rf"net-symbol\.json'?:? .*{pattern}"):
            read_symbol(tmp_path / "net-symbol.json")


class TestStatesTruncation:
    def test_every_cut_of_a_states_pickle_is_a_typed_error(self):
        """Every cut of MXNet's pickled states (NDArrays and an Adam): StatesFileError naming the file and the byte
        where the pickle ends."""
        data, _, _ = _pickled_states()
        states, _ = unpickle_states(data, "trainer.states", as_data=True)
        assert list(states) == [0]
        for cut in range(len(data)):
            with pytest.raises(StatesFileError, match=rf"'trainer.states'.* their pickle is cut short at byte {cut};"):
                unpickle_states(data[:cut], "trainer.states", as_data=True)


class TestHostileStates:
    @pytest.mark.parametrize("name, error, pattern", H.CASES, ids=[case[0] for case in H.CASES])
    def test_hostile_states_as_data(self, name, error, pattern):
        """The hostile pickles of tests/mxformats/hostile_states.py read as data where MXNet is absent (numpy 2 in
        ./.venv-torch): the same typed errors as in MXNet's environment, the traced peak within a few times the
        file."""
        tracemalloc.start()
        try:
            with pytest.raises(error, match=pattern):
                unpickle_states(H.HOSTILE[name], "hostile.states", as_data=True)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4 * len(H.HOSTILE[name]) + 2 * 2 ** 20, f"{name}: {peak} bytes"
