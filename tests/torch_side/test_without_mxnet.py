"""The torch side needs no MXNet: imports, typed errors where MXNet is needed, and the file formats read as data.

These tests run in ./.venv-torch (numpy 2, no mxnet; ``tests/test_torch_env.py`` starts them there) and in ./.venv.
Where MXNet is installed, a child process stands for an environment without it by blocking its import.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

import migrate
from mxformats.errors import MXNetFileError, UnsafeStatesError
from mxformats.ndarray import V2_MAGIC, V3_MAGIC, decode_ndarray, load_ndarrays
from mxformats.safe_pickle import safe_loads
from tests.torch_side import models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: Put first in a child's code: ``import mxnet`` then fails there as where MXNet is not installed.
BLOCK_MXNET = "import sys; sys.modules['mxnet'] = None\n"


def _child(code: str, *args, block_mxnet=True) -> subprocess.CompletedProcess:
    """Run ``code`` (or ``-m`` args) in a fresh interpreter of this environment, from the repository root."""
    command = [sys.executable, *args] if args else [sys.executable, "-c", (BLOCK_MXNET if block_mxnet else "") + code]
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)


class TestImports:
    def test_import_migrate_imports_no_mxnet(self):
        """``import migrate`` and ``import mxformats`` leave no ``mxnet`` in sys.modules, MXNet installed or not."""
        done = _child("import sys, migrate, mxformats, migrate.cli; print('mxnet' in sys.modules)", block_mxnet=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "False"

    def test_import_gluon_lr_without_mxnet_is_one_typed_error(self):
        """``import gluon_lr`` without MXNet raises MXNetRequiredError (an ImportError) saying what to install."""
        done = _child("from mxformats import MXNetRequiredError\n"
                      "try:\n    import gluon_lr\nexcept MXNetRequiredError as exc:\n"
                      "    print(type(exc).__mro__[1].__name__, exc.__cause__, '|', exc)\n")
        assert done.returncode == 0, done.stderr
        base, cause, message = done.stdout.split(" ", 2)
        assert (base, cause) == ("ModuleNotFoundError", "None")
        assert 'pip install "gluon-lr[mxnet]"' in message and "gluon_lr" in message and "numpy < 1.24" in message

    def test_mxnet_side_of_migrate_is_a_typed_error(self, tmp_path):
        """Running an MXNet model (check_training of symbol/params files) without MXNet: MXNetRequiredError (reading
        the files for name_mapping, generate_torch and the CLI does not: tests/migrate/test_without_mxnet_files.py)."""
        files = (str(tmp_path / "a-symbol.json"), str(tmp_path / "a.params"))
        code = (f"import numpy\nimport migrate\nfrom tests.torch_side import models\n"
                f"try:\n    migrate.check_training({files!r}, models.bn_depthwise_net(), "
                f"numpy.zeros((1, 3, 8, 8), numpy.float32))\n"
                f"except migrate.errors.MXNetRequiredError as exc:\n    print('typed:', exc)\n")
        done = _child(code)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("typed:") and 'pip install "gluon-lr[mxnet]"' in done.stdout

    def test_cli_check_without_mxnet_exits_2_with_one_line(self, tmp_path):
        """``migrate check`` (it trains the MXNet model) without MXNet: exit 2, one error line naming MXNet and the
        install, no traceback."""
        (tmp_path / "a-symbol.json").write_text("{}")
        (tmp_path / "a-0000.params").write_bytes(b"\0" * 16)
        (tmp_path / "settings.json").write_text("{}")
        code = ("import sys; from migrate.cli import main\n"
                f"sys.exit(main(['check', '--symbol', {str(tmp_path / 'a-symbol.json')!r}, '--params', "
                f"{str(tmp_path / 'a-0000.params')!r}, '--settings', {str(tmp_path / 'settings.json')!r}, '--torch', "
                f"'tests.torch_side.models:bn_depthwise_net', '--input-shape', '1,3,8,8']))\n")
        done = _child(code)
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and "needs MXNet 1.9.1" in done.stderr, done.stderr


def _v2(array: np.ndarray, flag: int, magic=V2_MAGIC) -> bytes:
    """The bytes MXNet 1.x writes for one dense array (layout in ``mxformats.ndarray``'s docstring)."""
    shape = struct.pack(f"<i{array.ndim}q", array.ndim, *array.shape)
    return struct.pack("<Ii", magic, 0) + shape + struct.pack("<iii", 1, 0, flag) + array.tobytes()


class TestNDArrayBytes:
    @pytest.mark.parametrize("dtype, flag", [("float32", 0), ("float64", 1), ("float16", 2), ("uint8", 3),
                                             ("int32", 4), ("int8", 5), ("int64", 6), ("bool", 7)])
    def test_dense_arrays_read_back(self, dtype, flag):
        """Each dtype of MXNet's version-2 layout decodes to the same values, shape and dtype."""
        array = (np.random.RandomState(0).randn(3, 4) * 50).astype(dtype)
        got = decode_ndarray(_v2(array, flag), "x")
        assert got.dtype == array.dtype and got.shape == (3, 4) and np.array_equal(got, array)

    def test_zero_d_array_of_numpy_shape_semantics(self):
        """A version-3 (np shape) 0-d array is a scalar array; a version-2 ndim 0 is MXNet's empty array (None)."""
        assert decode_ndarray(_v2(np.float32(2.5).reshape(()), 0, V3_MAGIC), "x") == np.float32(2.5)
        assert decode_ndarray(struct.pack("<Iii", V2_MAGIC, 0, 0), "x") is None

    @pytest.mark.parametrize("description, data, pattern", [
        ("truncated values", _v2(np.ones(4, np.float32), 0)[:-3], r"needs 16 bytes but only 13 are left at byte 32"),
        ("sparse", struct.pack("<Ii", V2_MAGIC, 1), r"row_sparse sparse array.*tostype\('default'\)"),
        ("unknown dtype", _v2(np.ones(2, np.float32), 0).replace(struct.pack("<i", 0) + b"\0\0\x80?", b""), "dtype"),
        ("trailing bytes", _v2(np.ones(2, np.float32), 0) + b"x", r"1 bytes follow the NDArray"),
        ("not an array", b"\xff" * 12, r"neither an NDArray magic number nor a dimension count"),
    ])
    def test_bad_bytes_name_the_offset(self, description, data, pattern):
        """Damaged bytes raise MXNetFileError naming the source and what is wrong where."""
        with pytest.raises(MXNetFileError, match=pattern):
            decode_ndarray(data, "'trainer.states'")

    def test_params_file(self, tmp_path):
        """An mx.nd.save file of two named arrays (its layout written by hand) reads as a dict in file order."""
        a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([7, 8], dtype=np.int64)
        names = b"".join(struct.pack("<Q", len(n)) + n for n in (b"arg:w", b"aux:m"))
        body = struct.pack("<QQQ", 0x112, 0, 2) + _v2(a, 0) + _v2(b, 6) + struct.pack("<Q", 2) + names
        (tmp_path / "n.params").write_bytes(body)
        got = load_ndarrays(tmp_path / "n.params")
        assert list(got) == ["arg:w", "aux:m"] and np.array_equal(got["arg:w"], a) and np.array_equal(got["aux:m"], b)
        (tmp_path / "cut.params").write_bytes(body[:60])
        with pytest.raises(MXNetFileError, match=r"cut.params.*at byte"):
            load_ndarrays(tmp_path / "cut.params")


def _pickled_states(global_module="mxnet.optimizer.optimizer", global_name="Adam") -> tuple:
    """A protocol-2 pickle as MXNet's ``save_states`` writes it, built by opcodes (no MXNet needed):
    ``({0: (NDArray mean, NDArray var)}, Adam(num_update=3, ...))``; and the two arrays."""
    mean, var = np.full((2, 2), 0.25, np.float32), np.full((2, 2), 4.0, np.float32)

    def ndarray(array):
        raw = _v2(array, 0)
        return (b"cmxnet.ndarray.ndarray\nNDArray\nN\x85R}X\x06\x00\x00\x00handle"
                b"cbuiltins\nbytearray\nB" + struct.pack("<I", len(raw)) + raw + b"\x85Rsb")
    optimizer = (f"c{global_module}\n{global_name}\n".encode() + b")\x81}"
                 b"X\n\x00\x00\x00num_updateK\x03sX\x13\x00\x00\x00_index_update_count}K\x00K\x03ssb")
    data = b"\x80\x02}K\x00" + ndarray(mean) + ndarray(var) + b"\x86s" + optimizer + b"\x86."
    return data, mean, var


class TestStatesAsData:
    def test_states_read_as_numpy_and_plain_data(self):
        """MXNet's pickled states read without MXNet: numpy arrays, the optimizer as its class name + attributes."""
        data, mean, var = _pickled_states()
        states, optimizer = safe_loads(data, "trainer.states", as_data=True)
        assert np.array_equal(states[0][0], mean) and np.array_equal(states[0][1], var)
        assert type(optimizer).__name__ == "Adam" and optimizer.num_update == 3
        assert optimizer._index_update_count == {0: 3}
        with pytest.raises(AttributeError, match="read-only"):
            optimizer.num_update = 4

    def test_a_foreign_class_is_refused_unread(self):
        """A pickle naming another callable (os.system) is refused before anything is imported or run."""
        data, _, _ = _pickled_states("os", "system")
        with pytest.raises(UnsafeStatesError, match=r"names os.system.*refused unread"):
            safe_loads(data, "trainer.states", as_data=True)


class TestTrainingStep:
    def test_exact_adam_step_with_groups_and_a_frozen_layer(self):
        """A settings document made by hand: the frozen layer keeps its weights bit for bit, the others move."""
        params = {name: {"index": i, "shape": list(models.mlp().get_parameter(key).shape), "dtype": "float32",
                         "lr_mult": 2.0 if "fc2" in name else 1.0, "wd_mult": 0.0 if "bias" in name else 1.0,
                         "frozen": "fc1" in name, "masked_elements": 0}
                  for i, (name, key) in enumerate(models.MLP_MAPPING.items())}
        settings = {"format": "gluon-lr-settings", "schema_version": 1, "lr_scheduler": None, "num_update": 0,
                    "params": params, "optimizer": {"name": "adam", "learning_rate": 0.01, "wd": 1e-3,
                                                    "rescale_grad": 0.25, "clip_gradient": None,
                                                    "multi_precision": False, "hyperparameters": {}}}
        torch.manual_seed(0)
        model = models.mlp()
        before = {k: v.detach().clone() for k, v in model.named_parameters()}
        optimizer = migrate.torch_optimizer(model, json.loads(json.dumps(settings)), models.MLP_MAPPING)
        lrs = sorted({g["lr"] for g in optimizer.param_groups})
        model(torch.randn(4, 5)).sum().backward()
        optimizer.step()
        for key, value in model.named_parameters():
            moved = float((value.detach() - before[key]).abs().max())
            assert (moved == 0.0) == key.startswith("2."), f"{key} moved by {moved}"
        assert lrs == [0.0, 0.01, 0.02]
