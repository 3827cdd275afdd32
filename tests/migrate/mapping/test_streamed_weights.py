"""Streaming conversion to weights.safetensors (issue 17): equal to convert_weights and to the .pt file bit for bit,
read by load_migration, and a full disk leaves no file and raises a typed error."""
import errno
import os

import pytest
import torch

import migrate
from migrate.errors import OutputWriteError, WeightShapeError
from migrate.mapping import stream
from migrate.mapping.stream import read_safetensors, write_safetensors
from migrate.migration_folder import torch_save


@pytest.mark.parametrize("key", ["residual-body-first", "dense-stack"])
def test_safetensors_equals_pt_bit_for_bit(pair, tmp_path, key):
    """Every tensor written by write_safetensors equals convert_weights' and the .pt file's, bytes and dtype."""
    net, model, _, _, mapping = pair(key)
    params = {p.name: p.data() for p in net.collect_params().values()}
    in_memory = migrate.convert_weights(params, mapping, model)
    torch_save(in_memory, tmp_path / "weights.pt")
    seen = []
    info = write_safetensors(params, mapping, tmp_path / "weights.safetensors", model, progress=seen.append)
    from_pt = torch.load(tmp_path / "weights.pt", weights_only=True)
    from_st = read_safetensors(tmp_path / "weights.safetensors")
    assert set(from_st) == set(from_pt) == set(model.state_dict())
    for name, value in from_pt.items():
        assert from_st[name].dtype == value.dtype and from_st[name].shape == value.shape, name
        assert from_st[name].numpy().tobytes() == value.numpy().tobytes(), name
    assert info["tensors"] == len(from_pt)
    assert info["bytes"] == sum(v.numel() * v.element_size() for v in from_pt.values())
    assert seen[-1] == info["bytes"] and len(seen) == len(from_pt)
    assert sorted(os.listdir(tmp_path)) == ["weights.pt", "weights.safetensors"], "a temporary file was left"
    model.load_state_dict(from_st)


def test_disk_full_leaves_no_file(pair, tmp_path, monkeypatch):
    """A write that fails with ENOSPC: OutputWriteError naming the file and the bytes, no file left behind."""
    net, model, _, _, mapping = pair("dense-stack")
    params = {p.name: p.data() for p in net.collect_params().values()}
    calls = {"n": 0}
    real = stream._write

    def full_after_two(handle, raw, path, needed):
        calls["n"] += 1
        if calls["n"] > 2:
            handle.write = lambda _raw: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device"))
        real(handle, raw, path, needed)

    monkeypatch.setattr(stream, "_write", full_after_two)
    with pytest.raises(OutputWriteError, match=r"weights\.safetensors.*disk filled.*bytes of tensor data"):
        write_safetensors(params, mapping, tmp_path / "weights.safetensors", model)
    assert calls["n"] == 3
    assert os.listdir(tmp_path) == [], f"left behind: {os.listdir(tmp_path)}"


def test_existing_file_kept_on_failure(pair, tmp_path):
    """A shape mismatch mid-way: WeightShapeError, the earlier weights.safetensors untouched, no temporary left."""
    net, model, _, _, mapping = pair("dense-stack")
    params = {p.name: p.data().asnumpy() for p in net.collect_params().values()}
    target = tmp_path / "weights.safetensors"
    write_safetensors(params, mapping, target, model)
    before = target.read_bytes()
    params["d1_weight"] = params["d1_weight"][:, :-1]
    with pytest.raises(WeightShapeError, match="'d1_weight'"):
        write_safetensors(params, mapping, target, model)
    assert target.read_bytes() == before
    assert os.listdir(tmp_path) == ["weights.safetensors"]
