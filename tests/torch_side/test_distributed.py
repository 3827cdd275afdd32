"""A migration folder continued on 2 gloo ranks (FSDP2, DCP checkpoints) and on one, without MXNet: these tests run in
./.venv-torch (``tests/test_torch_env.py`` starts them there) and in ./.venv.

The folder is the one ``migrate all`` writes, made here with migrate's public functions from a seeded torch net
(``models.sharded_net``: a 3-row layer split 2/1 and a 1-element bias that rank 1 holds no part of), its settings
written by hand (the exact Adam, a FactorScheduler, lr_mult and wd_mult, a frozen BatchNorm whose statistics are held,
an element mask across the ranks' boundary, ``num_devices`` 2) and the Adam state of 3 steps. MXNet's own runs
continued by DDP and FSDP2 (twin and generated module) are in ``tests/migrate/test_ddp.py``.
"""
import json
import re

import numpy as np
import pytest
import torch

import migrate
from devtools.local_cluster import run_torch_ddp
from migrate.mapping.stream import read_safetensors, write_state_dict
from migrate.migration_folder import optimizer_document, torch_save
from tests.torch_side import models

BATCH, STEPS, SAVE_AT = 8, 4, 2
#: float32; FSDP2 averages two half-batch gradient sums where one process adds the halves' gradients.
ATOL = 1e-5
#: Deadline of one job (the harness kills every rank past it); each collective fails after 60 s anyway.
TIMEOUT = 120.0
MAPPING = {"net_fc0_weight": "0.weight", "net_fc0_bias": "0.bias", "net_bn_gamma": "1.weight", "net_bn_beta": "1.bias",
           "net_fc1_weight": "3.weight", "net_fc1_bias": "3.bias", "net_fc2_weight": "5.weight",
           "net_fc2_bias": "5.bias"}
FROZEN = ("1.weight", "1.bias")
MASK = np.array([[0, 0, 0], [1, 0, 1], [0, 1, 1], [0, 0, 0]], dtype=np.float32)  # rows 0-1 on rank 0, 2-3 on rank 1
MODEL = "tests.torch_side.models:sharded_net"


def _settings() -> dict:
    """The settings document of a 2-device MXNet Adam run, by hand."""
    shapes = {key: list(p.shape) for key, p in models.sharded_net().named_parameters()}
    params = {mx: {"index": i, "shape": shapes[key], "dtype": "float32", "lr_mult": 2.0 if "fc2" in mx else 1.0,
                   "wd_mult": 0.0 if mx.endswith(("bias", "beta")) else 1.0, "frozen": key in FROZEN,
                   "masked_elements": int(MASK.sum()) if key == "3.weight" else 0}
              for i, (mx, key) in enumerate(MAPPING.items())}
    scheduler = {"type": "FactorScheduler", "base_lr": 0.01, "step": 2, "factor": 0.5, "stop_factor_lr": 1e-8,
                 "warmup_steps": 0, "warmup_begin_lr": 0.0, "warmup_mode": "linear"}
    return {"format": "gluon-lr-settings", "schema_version": 1, "lr_scheduler": scheduler, "num_update": 3,
            "num_devices": 2, "params": params,
            "optimizer": {"name": "adam", "learning_rate": 0.01, "wd": 1e-3, "rescale_grad": 1.0 / BATCH,
                          "clip_gradient": None, "multi_precision": False, "hyperparameters": {}}}


def _batches(count: int, seed: int) -> dict:
    rng = np.random.RandomState(seed)
    out = {}
    for i in range(count):
        out[f"x{i}"] = rng.randn(BATCH, models.SHARDED_SIZES[0]).astype(np.float32)
        out[f"y{i}"] = rng.randn(BATCH, models.SHARDED_SIZES[-1]).astype(np.float32)
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The migration folder (weights.safetensors, optimizer.pt) with the Adam state of 3 steps, and data.npz."""
    root = tmp_path_factory.mktemp("sharded")
    model, settings = models.sharded_net(), _settings()
    optimizer = migrate.torch_optimizer(model, settings, MAPPING)
    control = migrate.TorchControl(model, optimizer, MAPPING)
    control.freeze("3.weight", mask=MASK)
    warm = _batches(3, seed=1)
    for i in range(3):
        optimizer.zero_grad()
        ((model(torch.from_numpy(warm[f"x{i}"])) - torch.from_numpy(warm[f"y{i}"])) ** 2).sum().backward()
        optimizer.step()
    scheduler = migrate.torch_lr_scheduler(optimizer, settings)
    torch_save(optimizer_document(optimizer, scheduler, settings, MAPPING, control), root / "optimizer.pt")
    write_state_dict(model.state_dict(), root / "weights.safetensors")
    np.savez(root / "data.npz", **_batches(STEPS, seed=2))
    return root


def _case(folder, out, name, mode, **extra) -> dict:
    return dict({"name": name, "folder": str(folder), "model": MODEL, "mode": mode, "data": str(folder / "data.npz"),
                 "steps": STEPS, "out": str(out)}, **extra)


def _job(out, cases, world_size) -> list:
    """Run ``tests.torch_side.dist_worker`` on ``cases`` with ``world_size`` ranks; each rank's summary."""
    out.mkdir(exist_ok=True)
    job = out / f"job-{cases[0]['name']}.json"
    job.write_text(json.dumps(cases))
    stdouts = run_torch_ddp(["-m", "tests.torch_side.dist_worker", str(job)], out / f"logs-{cases[0]['name']}",
                            world_size=world_size, timeout=TIMEOUT)
    return [json.loads(text.strip().splitlines()[-1]) for text in stdouts]


#: (description, bad model builder in dist_worker, error on rank 0, on rank 1, pattern every message matches)
BAD_INPUTS = [
    ("parameters on two device meshes", "two_meshes", "ShardingError", "ShardingError",
     r"lie on 2 device meshes .*cpu mesh \[0, 1\].*cpu mesh \[1, 0\].*same mesh"),
    ("root left unsharded", "plain_beside_sharded", "ShardingError", "ShardingError",
     r"parameters \['1.weight', '1.bias', '3.weight'.*\(6 of 8\) are plain tensors beside 2 DTensors.*"
     r"fully_shard\(model\) on the root"),
    ("a Partial placement", "partial_placement", "ShardingError", "ShardingError",
     r"placements other than Shard\(dim\) and Replicate\(\) on \['0.weight \(Partial"),
    ("rank 1 outside the mesh", "rank_outside_mesh", "RankFailedError", "ShardingError",
     r"rank 1 is not in the cpu mesh \[0\].*would hold no part of any parameter"),
    ("the folder missing on rank 1", "folder_missing_on_rank_1", "RankFailedError", "InputFileError",
     r"sharded\d*-elsewhere': not a folder"),
    ("a DDP wrapper", "ddp_wrapper", "ShardingError", "ShardingError",
     r"DistributedDataParallel wrapper; load into the model itself and wrap after"),
]


@pytest.fixture(scope="module")
def runs(folder, tmp_path_factory):
    """Job 1 (2 ranks): FSDP2, FSDP2 with a DCP save before batch SAVE_AT, then each bad input; job 2 (2 ranks): the
    DCP resume; job 3 (1 rank): one process on 2 slices, on the whole batch, and FSDP2 on a 1-rank mesh."""
    out = tmp_path_factory.mktemp("runs")
    first = [_case(folder, out, "fsdp", "fsdp"),
             _case(folder, out, "dcp-save", "fsdp", save={"dir": str(out / "dcp"), "at": SAVE_AT})]
    first += [_case(folder, out, builder, "fsdp", bad=builder) for _, builder, *_ in BAD_INPUTS]
    summaries = {"two": _job(out, first, 2)}
    summaries["resume"] = _job(out, [_case(folder, out, "dcp-resume", "fsdp", first=SAVE_AT,
                                           resume={"dir": str(out / "dcp")})], 2)
    summaries["one"] = _job(out, [_case(folder, out, "single-slices", "single", slices=2),
                                  _case(folder, out, "single", "single"),
                                  _case(folder, out, "fsdp-world1", "fsdp")], 1)
    return out, summaries


def _weights(out, name, rank=0) -> dict:
    return dict(np.load(out / f"{name}-rank{rank}.npz"))


def _worst(got: dict, want: dict, keys=None) -> tuple:
    """(largest absolute difference, its key) over ``keys`` (default: every key of ``want``)."""
    return max((float(np.abs(got[k] - want[k]).max()), k) for k in (keys or want))


PARAMS = [key for key, _ in models.sharded_net().named_parameters()]


class TestFSDP2:
    """load_migration on a model sharded by fully_shard: every rank loads its blocks and trains on as one process."""

    def test_fsdp_equals_one_process(self, runs, folder):
        """FSDP2 on 2 ranks (each half of every batch) == one process adding both halves' gradients, within ATOL
        after 4 steps; both ranks hold the same whole weights; the trained layers moved."""
        out, _ = runs
        ranks = [_weights(out, "fsdp", r) for r in (0, 1)]
        one = _weights(out, "single-slices")
        diff, key = _worst(ranks[0], one, PARAMS)
        assert diff <= ATOL, f"FSDP2 differs from one process at {key} by {diff:.3g}"
        assert _worst(ranks[0], ranks[1], PARAMS)[0] == 0.0
        start = {k: v.numpy() for k, v in read_safetensors(folder / "weights.safetensors").items()}
        moved = _worst(ranks[0], start, ["0.weight", "5.weight", "5.bias"])
        assert moved[0] > 1e-4, f"the trained layers barely moved ({moved})"

    def test_frozen_and_masked_elements_stay(self, runs, folder):
        """The frozen BatchNorm's parameters and statistics and the masked elements of 3.weight (across the ranks'
        boundary) are bit for bit those of the folder; the unmasked ones moved."""
        out, _ = runs
        got = _weights(out, "fsdp")
        start = {k: v.numpy() for k, v in read_safetensors(folder / "weights.safetensors").items()}
        for key in FROZEN + ("1.running_mean", "1.running_var"):
            assert np.array_equal(got[key], start[key]), f"frozen {key} changed"
        masked = MASK == 1
        assert np.array_equal(got["3.weight"][masked], start["3.weight"][masked])
        assert not np.array_equal(got["3.weight"][~masked], start["3.weight"][~masked])

    def test_rank_without_a_block_of_a_small_tensor(self, runs):
        """The 1-element bias 5.bias lies on rank 0 alone (FSDP2 cuts it as torch.chunk); it trained as in one
        process; no warning on 2 ranks (the settings' num_devices is 2)."""
        out, summaries = runs
        assert models.sharded_net()[5].bias.shape == (1,)
        diff = float(np.abs(_weights(out, "fsdp", 1)["5.bias"] - _weights(out, "single-slices")["5.bias"]).max())
        assert diff <= ATOL
        assert all(s["fsdp"]["warnings"] == [] and s["fsdp"]["error"] is None for s in summaries["two"])

    def test_world_size_one(self, runs):
        """FSDP2 on a 1-rank mesh equals one process on the whole batch bit for bit; both warn that the MXNet run had
        2 devices."""
        out, summaries = runs
        diff, key = _worst(_weights(out, "fsdp-world1"), _weights(out, "single"))
        assert diff == 0.0, f"{key} differs by {diff}"
        for name in ("fsdp-world1", "single"):
            warned = summaries["one"][0][name]["warnings"]
            assert len(warned) == 1 and re.match(r"DeviceCountWarning: the MXNet run summed the gradients of 2 "
                                                 r"device\(s\).*over 1 rank\(s\)", warned[0]), warned


class TestCheckpoint:
    """torch.distributed.checkpoint of the model, the exact optimizer and the scheduler under FSDP2."""

    def test_dcp_resume_is_bit_identical(self, runs):
        """Saved before batch 2, loaded by a new job after load_migration: the weights, BatchNorm statistics and the
        state after batches 2 and 3 equal the uninterrupted run's bit for bit, on both ranks."""
        out, _ = runs
        for rank in (0, 1):
            resumed, straight = _weights(out, "dcp-resume", rank), _weights(out, "dcp-save", rank)
            assert sorted(resumed) == sorted(straight)
            diff, key = _worst(resumed, straight)
            assert diff == 0.0, f"rank {rank}: {key} differs by {diff}"
        assert _worst(_weights(out, "dcp-save"), _weights(out, "fsdp"))[0] == 0.0  # saving changed nothing


class TestBadInputs:
    """A model load_migration cannot load fails on every rank with one clear error, at once, never a hang."""

    @pytest.mark.parametrize("description, builder, rank0, rank1, pattern", BAD_INPUTS,
                             ids=[row[0] for row in BAD_INPUTS])
    def test_every_rank_fails(self, runs, description, builder, rank0, rank1, pattern):
        """Each rank raises the expected class (the others RankFailedError naming the failing rank); the messages
        match; each took under 10 s and the job went on to its next case."""
        _, summaries = runs
        errors = [s[builder]["error"] for s in summaries["two"]]
        assert [e.split(":")[0] if e else None for e in errors] == [rank0, rank1], errors
        for error in errors:
            assert re.search(pattern, error), error
        if rank0 == "RankFailedError":
            assert "failed on rank 1 of 2" in errors[0]
        assert all(s[builder]["seconds"] < 10 for s in summaries["two"])


class TestTensorFile:
    """The reading side of the weights files: a block at a time, the file mapped anew between pieces."""

    @pytest.fixture
    def files(self, tmp_path, monkeypatch):
        """The same tensors in a safetensors file and a torch.save file; pieces of 64 bytes (many remappings)."""
        from safetensors.torch import save_file

        from migrate.mapping import stream
        monkeypatch.setattr(stream, "REMAP_BYTES", 64)
        tensors = {"a": torch.arange(60.0).reshape(6, 10), "scalar": torch.tensor(3.0),
                   "ints": torch.arange(5, dtype=torch.int64), "empty": torch.zeros(0, 3)}
        save_file(tensors, tmp_path / "w.safetensors")
        torch.save(tensors, tmp_path / "w.pt")
        return tensors, [stream.TensorFile(tmp_path / "w.safetensors"),
                         stream.TensorFile(tmp_path / "w.pt", lambda: torch.load(tmp_path / "w.pt", mmap=True))]

    @pytest.mark.parametrize("key, block", [("a", ()), ("a", (slice(1, 5), slice(2, 7))), ("a", (slice(4, 4),)),
                                            ("scalar", ()), ("ints", (slice(3, 5),)), ("empty", ())])
    def test_blocks_read_back(self, files, key, block):
        """Each block equals the tensor's slice (values, shape, dtype) in both formats, whole or cut, empty blocks
        and 0-d tensors included."""
        tensors, readers = files
        for reader in readers:
            got = reader.read(key, block)
            want = tensors[key][block]
            assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want), reader.path

    def test_read_into_out_casts(self, files):
        """``out`` receives the block, cast to its dtype; the shapes come from the header alone."""
        tensors, readers = files
        for reader in readers:
            out = torch.empty(3, 10, dtype=torch.float64)
            assert reader.read("a", (slice(3, 6),), out=out) is out and torch.equal(out, tensors["a"][3:].double())
            assert reader.shapes == {k: tuple(v.shape) for k, v in tensors.items()}

    @pytest.mark.parametrize("description, content, pattern", [
        ("not a safetensors file", b"\x00" * 40, r"expected a safetensors file.*could not read it"),
        ("a torch file of a dict holding a string", {"a": torch.ones(2), "b": "text"},
         r"expected a dict of tensors, it holds \['b \(str\)'\]"),
    ])
    def test_bad_files(self, tmp_path, description, content, pattern):
        """A file that is not a weights file raises InputFileError naming it and what it holds."""
        from migrate.errors import InputFileError
        from migrate.mapping.stream import TensorFile
        path = tmp_path / "weights"
        if isinstance(content, bytes):
            path.write_bytes(content)
            opened = lambda: TensorFile(path)  # noqa: E731
        else:
            torch.save(content, path)
            opened = lambda: TensorFile(path, lambda: torch.load(path, mmap=True))  # noqa: E731
        with pytest.raises(InputFileError, match=pattern):
            opened()


class TestGradientScale:
    """load_migration's gradient scale and device check in one process (no process group: data_parallel_size 1)."""

    @pytest.mark.parametrize("kwargs, scale, warned", [
        ({}, 1 / BATCH, True),                                   # 1 rank for MXNet's 2 devices
        ({"data_parallel_size": 2}, 2 / BATCH, False),          # MXNet's 1/8 times the 2 averaging ranks
        ({"data_parallel_size": 2, "rescale_grad": 0.5}, 0.5, False),  # rescale_grad is used as given
        ({"rescale_grad": 1.0}, 1.0, True),
    ])
    def test_scale_and_warning(self, folder, kwargs, scale, warned):
        """Every group's rescale_grad is MXNet's times data_parallel_size, or rescale_grad as given; a
        DeviceCountWarning names both counts when they differ."""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            optimizer, _ = migrate.load_migration(folder, models.sharded_net(), **kwargs)
        assert {group["rescale_grad"] for group in optimizer.param_groups} == {scale}
        messages = [str(w.message) for w in caught if w.category is migrate.errors.DeviceCountWarning]
        assert len(messages) == warned
        if warned:
            assert re.match(r"the MXNet run summed the gradients of 2 device\(s\).*over 1 rank\(s\)", messages[0])

    @pytest.mark.parametrize("description, value", [("zero", 0), ("negative", -2), ("a bool", True),
                                                    ("a float", 2.0), ("a string", "2")])
    def test_bad_data_parallel_size(self, folder, description, value):
        """data_parallel_size must be None or an integer >= 1: ArgumentError naming it, nothing loaded."""
        model = models.sharded_net()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        with pytest.raises(migrate.errors.ArgumentError, match=r"load_migration\(data_parallel_size\) must be None or "
                                                                 r"an integer >= 1"):
            migrate.load_migration(folder, model, data_parallel_size=value)
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
