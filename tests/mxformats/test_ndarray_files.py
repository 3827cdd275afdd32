"""mxformats.ndarray against MXNet 1.9.1's own ``mx.nd.load``: for every dense dtype and every format version MXNet
1.x reads (2 and 3 written by ``mx.nd.save``; 1 and legacy written by hand from MXNet's Load code, and shown to be
MXNet's layout by ``mx.nd.load`` reading them), named and unnamed lists, 0-d and empty arrays, the reader gives exactly
what MXNet gives (names, dtypes, shapes, bytes). Sparse arrays are refused by name; damaged files are refused with
typed errors where MXNet fails too, and what the reader accepts after random header damage MXNet reads the same."""
import random

import mxnet as mx
import numpy as np
import pytest

from mxformats.errors import MXNetFileError
from mxformats.ndarray import index_ndarrays, load_ndarrays
from tests.torch_side import ndarray_bytes as B

SHAPES = {"legacy": [(3, 4), (5,), (2, 1, 3), ()], "v1": [(3, 4), (5,), (2, 1, 3), ()],
          "v2": [(3, 4), (5,), (2, 1, 3)], "v3": [(3, 4), (5,), (2, 1, 3), (), (0, 3)]}


def _mxnet_load(path, np_shape=False):
    """What ``mx.nd.load`` gives, as numpy (a dict in file order, or a list)."""
    with mx.util.np_shape(np_shape):
        loaded = mx.nd.load(str(path))
        if isinstance(loaded, dict):
            return {name: value.asnumpy() for name, value in loaded.items()}
        return [value.asnumpy() for value in loaded]


def _assert_same(ours, theirs) -> None:
    """Same container, names in the same order, and per array the same dtype, shape and bytes (NaNs included)."""
    assert type(ours) is type(theirs)
    if isinstance(theirs, dict):
        assert list(ours) == list(theirs)
        pairs = [(name, ours[name], theirs[name]) for name in theirs]
    else:
        assert len(ours) == len(theirs)
        pairs = [(i, a, b) for i, (a, b) in enumerate(zip(ours, theirs))]
    for name, a, b in pairs:
        assert (a.dtype, a.shape) == (np.dtype(b.dtype), b.shape), name
        assert a.tobytes() == b.tobytes(), f"{name}: values differ"


def _write(path, version: str, arrays: dict) -> None:
    """``arrays`` saved in format ``version``: by mx.nd.save (v2; v3 under numpy shape semantics), else by hand."""
    if version in ("v2", "v3"):
        with mx.util.np_shape(version == "v3"):
            mx.nd.save(str(path), {name: mx.nd.array(value, dtype=value.dtype) if value.size else
                                   mx.nd.zeros(value.shape, dtype=value.dtype) for name, value in arrays.items()})
    else:
        path.write_bytes(B.list_bytes([B.array_bytes(a, version) for a in arrays.values()], list(arrays)))


@pytest.mark.parametrize("version", B.VERSIONS)
@pytest.mark.parametrize("dtype", B.DTYPES)
def test_every_dtype_and_version_reads_as_mxnet_reads(tmp_path, dtype, version):
    """Named arrays of ``dtype`` (2-d, 1-d, 3-d, and 0-d / empty where the version has them) in format ``version``:
    load_ndarrays == mx.nd.load, bit for bit."""
    rng = np.random.RandomState(B.DTYPES.index(dtype))
    arrays = {f"arg:p{i}": B.random_array(dtype, shape, rng) for i, shape in enumerate(SHAPES[version])}
    path = tmp_path / f"{dtype}-{version}.params"
    _write(path, version, arrays)
    ours = load_ndarrays(path)
    _assert_same(ours, _mxnet_load(path, np_shape=version == "v3"))
    _assert_same(ours, arrays)


@pytest.mark.parametrize("dtype", B.DTYPES)
def test_hand_written_version_2_is_what_mxnet_writes(tmp_path, dtype):
    """The hand-written layout (used for versions 1 and legacy) is MXNet's: for version 2 it is mx.nd.save's, byte
    for byte, named and unnamed."""
    rng = np.random.RandomState(7)
    arrays = {"a": B.random_array(dtype, (2, 3), rng), "b": B.random_array(dtype, (4,), rng)}
    mx.nd.save(str(tmp_path / "named.params"), {k: mx.nd.array(v, dtype=v.dtype) for k, v in arrays.items()})
    mx.nd.save(str(tmp_path / "list.params"), [mx.nd.array(v, dtype=v.dtype) for v in arrays.values()])
    records = [B.array_bytes(a, "v2") for a in arrays.values()]
    assert (tmp_path / "named.params").read_bytes() == B.list_bytes(records, list(arrays))
    assert (tmp_path / "list.params").read_bytes() == B.list_bytes(records)


def test_lists_empty_and_gluon_files(tmp_path):
    """An unnamed list, an empty file, a zero-size array (version 2), Gluon's save_parameters and export files."""
    rng = np.random.RandomState(1)
    values = [rng.randn(2, 3).astype("float32"), rng.randint(0, 9, 4).astype("int64")]
    mx.nd.save(str(tmp_path / "list.params"), [mx.nd.array(v, dtype=v.dtype) for v in values])
    mx.nd.save(str(tmp_path / "empty.params"), [])
    mx.nd.save(str(tmp_path / "zero.params"), {"z": mx.nd.empty((0, 3)), "w": mx.nd.ones((2,))})
    net = mx.gluon.nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(mx.gluon.nn.Conv2D(2, 3, in_channels=1), mx.gluon.nn.BatchNorm(in_channels=2),
                mx.gluon.nn.Dense(3, in_units=2 * 6 * 6))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.ones((1, 1, 8, 8)))
    net.save_parameters(str(tmp_path / "gluon.params"))
    net.export(str(tmp_path / "net"))
    for name in ("list", "empty", "zero", "gluon", "net-0000"):
        _assert_same(load_ndarrays(tmp_path / f"{name}.params"), _mxnet_load(tmp_path / f"{name}.params"))
    assert load_ndarrays(tmp_path / "list.params")[1].dtype == np.int64 and load_ndarrays(tmp_path / "empty.params") \
        == []
    assert sorted(load_ndarrays(tmp_path / "net-0000.params"))[-1] == "aux:net_batchnorm0_running_var"


def test_bfloat16_reads_as_mxnet_gives_it(tmp_path):
    """bfloat16 (flag 12; MXNet's Python cannot make one on CPU, so written by hand): the structured uint16 dtype
    mx.nd.load gives, same bits."""
    bits = np.array([0x3FC0, 0x4000, 0xC040], dtype="<u2")
    (tmp_path / "bf16.params").write_bytes(B.list_bytes([B.array_bytes(bits, "v2", flag=12)], ["h"]))
    ours, theirs = load_ndarrays(tmp_path / "bf16.params"), _mxnet_load(tmp_path / "bf16.params")
    _assert_same(ours, theirs)
    assert ours["h"].dtype.names == ("bfloat16",) and ours["h"]["bfloat16"].tolist() == bits.tolist()


@pytest.mark.parametrize("flag, name", [(8, "int16"), (9, "uint16"), (10, "uint32"), (11, "uint64")])
def test_dtypes_mxnet_cannot_load_are_refused(tmp_path, flag, name):
    """Flags 8-11 (int16 ...): mx.nd.load refuses them ("Unknown type enum"); so does the reader, naming the dtype."""
    path = tmp_path / "odd.params"
    path.write_bytes(B.list_bytes([B.array_bytes(np.arange(3, dtype="<i2"), "v2", flag=flag)], ["x"]))
    with pytest.raises(mx.base.MXNetError, match=f"Unknown type enum {flag}"):
        mx.nd.load(str(path))
    with pytest.raises(MXNetFileError, match=rf"odd.params'?: array 0 has dtype {name} \(flag {flag}\) at byte 52"):
        load_ndarrays(path)


def test_sparse_arrays_are_refused_by_name(tmp_path):
    """A file with a row_sparse and a csr array among dense ones: one error naming both (and where they start)."""
    dense = np.array([[0, 0], [1, 2], [0, 0], [3, 4]], dtype=np.float32)
    mx.nd.save(str(tmp_path / "sparse.params"), {"w": mx.nd.ones((2,)), "rows": mx.nd.array(dense).tostype(
        "row_sparse"), "table": mx.nd.array(dense.T, dtype="float64").tostype("csr"), "b": mx.nd.zeros((3,))})
    pattern = (r"sparse.params'?: 'rows' \(a row_sparse sparse array at byte 64\), 'table' \(a csr sparse array at "
               r"byte \d+\): only dense arrays.*tostype\('default'\)")
    with pytest.raises(MXNetFileError, match=pattern):
        load_ndarrays(tmp_path / "sparse.params")


@pytest.fixture(scope="module")
def small_file(tmp_path_factory):
    """A 3-array mx.nd.save file (float32, int64, bool) and its bytes."""
    path = tmp_path_factory.mktemp("small") / "small.params"
    rng = np.random.RandomState(0)
    mx.nd.save(str(path), {"arg:w": mx.nd.array(rng.randn(3, 4)), "aux:m": mx.nd.array(rng.randint(0, 9, 5),
               dtype="int64"), "b": mx.nd.array(rng.rand(2, 2, 2) > 0.5, dtype="bool")})
    return path, path.read_bytes()


def test_every_truncation_is_refused_as_mxnet_refuses_it(small_file, tmp_path):
    """Every cut of the file: MXNetFileError naming the file and a byte offset within the cut; mx.nd.load fails too."""
    _, data = small_file
    path = tmp_path / "cut.params"
    for cut in range(len(data)):
        path.write_bytes(data[:cut])
        with pytest.raises(MXNetFileError, match=r"cut.params'?: .* at byte (\d+)") as caught:
            load_ndarrays(path)
        offset = int(caught.value.args[0].split(" at byte ")[1].split(";")[0].split()[0])
        assert offset <= cut, (cut, caught.value)
        with pytest.raises(mx.base.MXNetError):
            mx.nd.load(str(path))


def test_header_damage_is_refused_or_read_as_mxnet_reads_it(small_file, tmp_path):
    """400 seeded byte changes in the header bytes (list header, array headers, names): each gives MXNetFileError
    (naming the file and the offset) or arrays equal to mx.nd.load's of the same bytes. MXNet is only run on what the
    reader accepts: on a damaged dimension it allocates what the header claims (the OOM killer ended a try)."""
    source, data = small_file
    index = index_ndarrays(source)
    header = set(range(24)) | {b for key in index for b in range(index.info(key).start, index.info(key).offset)}
    header |= set(range(max(index.info(k).offset + index.info(k).nbytes for k in index), len(data)))
    picker, path, verdicts = random.Random(0), tmp_path / "damaged.params", {"refused": 0, "same": 0}
    for trial in range(400):
        damaged, at = bytearray(data), picker.choice(sorted(header))
        damaged[at] ^= (1 << picker.randrange(8)) if trial % 2 else picker.randrange(1, 256)
        path.write_bytes(bytes(damaged))
        try:
            ours = load_ndarrays(path)
        except MXNetFileError as exc:
            assert "damaged.params" in str(exc) and " at byte " in str(exc), exc
            verdicts["refused"] += 1
            continue
        _assert_same(ours, _mxnet_load(path))
        verdicts["same"] += 1
    assert verdicts["refused"] >= 250 and verdicts["same"] >= 50, verdicts  # 305 and 95 when written
