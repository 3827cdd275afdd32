"""Migrated param groups under torch DistributedDataParallel: two gloo ranks on CPU (127.0.0.1), issue 7 point 3.

A float64 Gluon net is trained 3 steps by LrTrainer (lr_mult/wd_mult rules, a frozen layer, an lr scheduler; SGD
with momentum, and Adam), exported (settings, states, weights), migrated with migrate's public functions, and
trained 4 more steps three ways: under DDP (each rank half of each batch), in one torch process (whole batch) and
on in MXNet. See ``tests/migrate/ddp_worker.py``.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from devtools.local_cluster import ClusterError, run_torch_ddp
from tests.migrate import ddp_worker as W
from tests.test_torch_env import torch_python  # noqa: F401 (the fixture: ./.venv-torch's interpreter)

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

#: float64 throughout. MXNet's SGD/Adam kernels and migrate's exact optimizers agree to ~1e-16; DDP averages two
#: half-batch gradient sums where one process sums the whole batch, which changes only the rounding.
ATOL = 1e-12
#: Hard deadline of a DDP job (the harness kills every rank past it); generous for a loaded 2-core machine.
TIMEOUT = 120.0


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """case -> (folder with the MXNet files, MXNet reference weights), for every case of ``W.CASES``."""
    out = {}
    for case in W.CASES:
        folder = tmp_path_factory.mktemp("mx") / case
        folder.mkdir()
        out[case] = (folder, W.mx_phase(case, folder))
    return out


@pytest.fixture
def started():
    """Every process the test starts; killed (and the test failed) if one is still running at teardown."""
    procs = []
    try:
        yield procs
    finally:
        alive = [p for p in procs if p.poll() is None]
        for proc in alive:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert not alive, f"{len(alive)} process(es) were left running"


def _worst(got: dict, want: dict, keys) -> tuple:
    """(largest absolute difference, its key) between two dicts of arrays over ``keys``."""
    return max((float(np.abs(np.asarray(got[k]) - np.asarray(want[k])).max()), k) for k in keys)


@pytest.fixture(scope="module")
def ddp_run(cases, tmp_path_factory):
    """Run the DDP job once for all cases; returns the output folder with ``{case}-rank{r}.npz``."""
    out, started = tmp_path_factory.mktemp("ddp"), []
    run_torch_ddp(["-m", "tests.migrate.ddp_worker", str(out), "0"] + [str(cases[c][0]) for c in W.CASES],
                  out / "logs", timeout=TIMEOUT, started=started)
    assert len(started) == 2 and all(p.poll() is not None for p in started), "a DDP rank was left running"
    return out


class TestDDPMigratedGroups:
    """The migrated model, param groups, optimizer state and lr schedule train under DDP as in one process."""

    def test_mapping_and_groups_follow_the_rules(self, cases):
        """name_mapping finds the true names; each torch parameter's group has the rules' lr and wd, by id."""
        for case, (folder, ref) in cases.items():
            assert dict(ref["mapping"]) == W.TRUTH, f"{case}: mapping {dict(ref['mapping'])}"
            model, optimizer, _ = W.migrated(folder)
            rate, wd = W.mx_rate(case, W.MX_STEPS + 1), W.CASES[case][1]["wd"]
            group_of = {id(p): g for g in optimizer.param_groups for p in g["params"]}
            for key, param in model.named_parameters():
                expected = W.expected_multipliers()[key]
                if expected is None:
                    group = group_of[id(param)]
                    assert group["frozen"] and group["lr"] == 0 and not param.requires_grad, f"{case}: {key} not frozen"
                    continue
                group = group_of[id(param)]
                got, want = (group["lr"], group["weight_decay"]), (rate * expected[0], wd * expected[1])
                assert got == pytest.approx(want, rel=1e-12, abs=0), f"{case}: {key} (lr, wd) {got}, expected {want}"

    @pytest.mark.parametrize("control", ["no multipliers", "no optimizer state"])
    def test_controls_end_far_from_mxnet(self, cases, control):
        """Without the multipliers (every group at the base lr and wd), or without the converted optimizer state, the
        weights end far from MXNet's: the comparisons below can fail."""
        for case, (folder, ref) in cases.items():
            model, optimizer, scheduler = W.migrated(folder, convert_state=control != "no optimizer state")
            for group in optimizer.param_groups if control == "no multipliers" else ():
                group["lr"] /= group["lr_mult"]
                group["lr_mult"], group["weight_decay"] = 1.0, W.CASES[case][1]["wd"]
            got = W.torch_train(model, optimizer, scheduler)
            diff, key = _worst(got, {k: ref["final"][m] for m, k in W.TRUTH.items()}, got)
            assert diff > 1e-3, f"{case}, {control}: the weights still end at MXNet's (largest diff {diff} at {key})"

    @pytest.mark.parametrize("case", list(W.CASES))
    def test_two_ranks_equal_one_process_and_mxnet(self, case, cases, ddp_run):
        """Both DDP ranks end equal to each other, to one process and to MXNet (ATOL); the frozen layer is unmoved."""
        folder, ref = cases[case]
        model, optimizer, scheduler = W.migrated(folder)
        one = W.torch_train(model, optimizer, scheduler)
        final = {key: ref["final"][mx] for mx, key in W.TRUTH.items()}
        start = {key: ref["migrated"][mx] for mx, key in W.TRUTH.items()}
        ranks = [dict(np.load(ddp_run / f"{case}-rank{r}.npz")) for r in (0, 1)]
        assert set(ranks[0]) == set(W.TRUTH.values()), f"rank 0 saved {sorted(ranks[0])}"
        for rank, got in enumerate(ranks):
            diff, key = _worst(got, one, got)
            assert diff <= ATOL, f"{case} rank {rank}: {key} differs from the one-process run by {diff}"
            diff, key = _worst(got, final, got)
            assert diff <= ATOL, f"{case} rank {rank}: {key} differs from MXNet continued by {diff}"
            for key in ("hidden.weight", "hidden.bias"):
                assert np.array_equal(got[key], start[key]), f"{case} rank {rank}: frozen {key} moved"
        diff, key = _worst(ranks[0], ranks[1], ranks[0])
        assert diff == 0.0, f"{case}: the ranks disagree at {key} by {diff}"
        diff, key = _worst(ranks[0], start, [k for k in start if not k.startswith("hidden.")])
        assert diff > 1e-3, f"{case}: the trained layers barely moved (largest change {diff} at {key})"


class TestDDPFailure:
    """A rank that dies mid-training fails the job at once, with its name, and leaves no process behind."""

    def test_dead_rank_fails_fast(self, cases, tmp_path, started):
        """Rank 1 exits before a backward pass (rank 0 waits in the all-reduce): ClusterError at once, not at the
        deadline, with both ranks' exit codes and output."""
        begin = time.monotonic()
        with pytest.raises(ClusterError, match=r"rank1 \(exit code 3\)") as info:
            run_torch_ddp(["-m", "tests.migrate.ddp_worker", str(tmp_path), str(W.MX_STEPS + 2),
                           str(cases["sgd"][0])], tmp_path / "logs", timeout=TIMEOUT, started=started)
        elapsed, message = time.monotonic() - begin, str(info.value)
        assert re.match(r"role 'rank[01]' died with exit code [13] before", message), \
            f"not a death report after {elapsed:.1f} s (deadline {TIMEOUT} s): {message[:300]}"
        assert "rank0 (exit code" in message, f"the error shows no tail of rank 0: {message}"
        assert not list(tmp_path.glob("*.npz")), "a rank finished although its peer died"


# --------------------------------------------------------------------------------------------------------------------
# MXNet's multi-device run (ctx=[cpu(0), cpu(1)]) continued by DDP and FSDP2 on 2 ranks of ./.venv-torch (no MXNet)

CTX_COUNT, BATCH_MD, MD_STEPS = 2, 8, 4
#: float32: the torch ranks average two gradients MXNet adds on its devices (the same sums, another rounding)
MD_ATOL = 1e-5
MODELS = {"twin": "tests.torch_side.models:bn_depthwise_net", "generate": "generate:Bndw"}


def _md_steps(net, trainer, batches, ctx) -> None:
    """MXNet's multi-device step: each device half the batch (split_and_load), a loss summed per device,
    ``trainer.step(batch)`` (rescale_grad 1/8 of the gradients the kvstore adds over the devices)."""
    import mxnet as mx
    from mxnet import autograd, gluon
    for x, y in batches:
        xs, ys = (gluon.utils.split_and_load(mx.nd.array(a), ctx) for a in (x, y))
        with autograd.record():
            losses = [((net(a) - b) ** 2).sum() for a, b in zip(xs, ys)]
        autograd.backward(losses)
        trainer.step(len(x))


def _per_device(net) -> dict:
    """MXNet name -> [numpy copy on each device]."""
    import mxnet as mx
    mx.nd.waitall()
    return {name: [d.asnumpy().copy() for d in p.list_data()] for name, p in net.collect_params().items()}


@pytest.fixture(scope="module")
def multi_device(tmp_path_factory):
    """LrTrainer (SGD with momentum, a FactorScheduler, head lr_mult 2, no wd on norms, the first conv frozen, a mask
    on the depthwise conv) on ctx=[cpu(0), cpu(1)], 4 steps; the exported files; 4 more MXNet steps per device."""
    import mxnet as mx

    from tests.test_torch_env import MxBnDepthwise, bn_depthwise_trainer
    folder, ctx = tmp_path_factory.mktemp("multi_device"), [mx.cpu(i) for i in range(CTX_COUNT)]
    mx.random.seed(0)
    net = MxBnDepthwise(prefix="bndw_")
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize()
    sched = mx.lr_scheduler.FactorScheduler(step=3, factor=0.5, base_lr=0.05)
    trainer, mask = bn_depthwise_trainer(net, "sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-3,
                                                      "lr_scheduler": sched})
    rng = np.random.RandomState(5)
    data = [(rng.randn(BATCH_MD, 3, 8, 8).astype("float32"), rng.randn(BATCH_MD, 5).astype("float32"))
            for _ in range(2 * MD_STEPS)]
    _md_steps(net, trainer, data[:MD_STEPS], ctx)
    net.export(str(folder / "bndw"))
    trainer.export_settings(str(folder / "settings.json"))
    trainer.save_states(str(folder / "trainer.states"))
    np.savez(folder / "data.npz", **{f"{v}{i}": a for i, (x, y) in enumerate(data[MD_STEPS:])
                                     for v, a in (("x", x), ("y", y))})
    middle = _per_device(net)
    _md_steps(net, trainer, data[MD_STEPS:], ctx)
    return {"folder": folder, "middle": middle, "final": _per_device(net), "mask": mask}


def _migrate_all(folder, model, out) -> None:
    """``migrate all`` (this environment) of the multi-device run's files for ``model`` (twin or generate)."""
    torch_flag = "generate" if model == "generate" else MODELS["twin"]
    done = subprocess.run([sys.executable, "-m", "migrate", "all", "--symbol", str(folder / "bndw-symbol.json"),
                           "--params", str(folder / "bndw-0000.params"), "--settings", str(folder / "settings.json"),
                           "--states", str(folder / "trainer.states"), "--torch", torch_flag, "--input-shape",
                           "1,3,8,8", "--out", str(out)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=str(ROOT))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def md_runs(multi_device, torch_python, tmp_path_factory):
    """Both models migrated; in ./.venv-torch, one job of 2 ranks (DDP and FSDP2 per model, and DDP of the twin with
    data_parallel_size=1) and one process (each model on both halves of every batch, as MXNet's devices)."""
    out = tmp_path_factory.mktemp("md_runs")
    cases = {"two": [], "one": []}
    for model, spec in MODELS.items():
        folder = out / model
        _migrate_all(multi_device["folder"], model, folder)
        base = {"folder": str(folder), "model": spec, "data": str(multi_device["folder"] / "data.npz"),
                "steps": MD_STEPS, "out": str(out)}
        cases["two"] += [dict(base, name=f"{model}-{mode}", mode=mode) for mode in ("ddp", "fsdp")]
        cases["one"].append(dict(base, name=f"{model}-single", mode="single", slices=CTX_COUNT))
    cases["two"].append(dict(cases["two"][0], name="twin-ddp-unscaled", load={"data_parallel_size": 1}))
    summaries = {}
    for job, world in (("two", 2), ("one", 1)):
        (out / f"{job}.json").write_text(json.dumps(cases[job]))
        texts = run_torch_ddp(["-m", "tests.torch_side.dist_worker", str(out / f"{job}.json")], out / f"logs-{job}",
                              world_size=world, timeout=TIMEOUT, python=torch_python)
        summaries[job] = [json.loads(text.strip().splitlines()[-1]) for text in texts]
    mappings = {model: migrate_mapping(out / model) for model in MODELS}
    return out, summaries, mappings


def migrate_mapping(folder) -> dict:
    """MXNet name -> torch key of a migration folder (``mapping.json``)."""
    import migrate
    mapping = migrate.NameMapping.load(folder / "mapping.json")
    return {name: mapping[name] for name in mapping}


def rank_weights(out, name) -> list:
    return [dict(np.load(out / f"{name}-rank{r}.npz")) for r in range(CTX_COUNT)]


def _is_statistic(name: str) -> bool:
    return "running_" in name


class TestMultiDeviceRun:
    """LrTrainer on ctx=[cpu(0), cpu(1)] (each device half the batch, BatchNorm per device) continued in ./.venv-torch
    by DDP and FSDP2 on 2 gloo ranks with the same halves, through load_migration's default gradient scale."""

    def test_settings_record_the_devices(self, multi_device):
        """The settings file says the run summed the gradients of 2 devices."""
        settings = json.loads((multi_device["folder"] / "settings.json").read_text())
        assert settings["num_devices"] == CTX_COUNT

    @pytest.mark.parametrize("name", [f"{m}-{mode}" for m in MODELS for mode in ("ddp", "fsdp")])
    def test_ranks_continue_mxnet(self, multi_device, md_runs, name):
        """Each rank's weights after 4 steps are MXNet's (device 0) within MD_ATOL; the ranks agree bit for bit; the
        frozen conv and the masked elements are unchanged bit for bit; no warning (2 ranks, 2 devices)."""
        out, summaries, mappings = md_runs
        mapping, final, middle = mappings[name.split("-")[0]], multi_device["final"], multi_device["middle"]
        ranks = rank_weights(out, name)
        params = [mx for mx in mapping if mx in final and not _is_statistic(mx)]
        assert len(params) == 8, params
        diff, worst = max((float(np.abs(ranks[0][mapping[mx]] - final[mx][0]).max()), mx) for mx in params)
        assert diff <= MD_ATOL, f"{name}: {worst} differs from MXNet by {diff:.3g}"
        assert all(np.array_equal(ranks[0][mapping[mx]], ranks[1][mapping[mx]]) for mx in params)
        conv, dw, masked = mapping["bndw_conv_weight"], mapping["bndw_dw_weight"], multi_device["mask"] == 1
        assert np.array_equal(ranks[0][conv], middle["bndw_conv_weight"][0])
        assert np.array_equal(ranks[0][dw][masked], middle["bndw_dw_weight"][0][masked])
        assert not np.array_equal(ranks[0][dw][~masked], middle["bndw_dw_weight"][0][~masked])
        assert all(s[name]["warnings"] == [] for s in summaries["two"])

    @pytest.mark.parametrize("name", [f"{m}-{mode}" for m in MODELS for mode in ("ddp", "fsdp")])
    def test_running_statistics_per_rank(self, multi_device, md_runs, name):
        """Each rank keeps its own BatchNorm statistics as each MXNet device does: started from MXNet's average of
        the devices (what ``export`` writes), the ranks' average running mean after 4 steps is the devices' average
        (MD_ATOL). (Running variances are left out: torch's BatchNorm2d adds the unbiased batch variance, MXNet's the
        biased one, in every run, one device or several.)"""
        out, _, mappings = md_runs
        mapping, ranks = mappings[name.split("-")[0]], rank_weights(out, name)
        stats = [mx for mx in mapping if mx.endswith("running_mean")]
        assert len(stats) == 2, stats
        for mx in stats:
            got = (ranks[0][mapping[mx]] + ranks[1][mapping[mx]]) / 2
            diff = float(np.abs(got - np.mean(multi_device["final"][mx], axis=0)).max())
            assert diff <= MD_ATOL, f"{name}: {mx} differs by {diff:.3g}"

    @pytest.mark.parametrize("model", list(MODELS))
    def test_fsdp_equals_one_process(self, md_runs, model):
        """FSDP2 on 2 ranks equals one process that runs both halves (BatchNorm per half) within MD_ATOL; that process,
        with 1 rank for MXNet's 2 devices, gets one DeviceCountWarning."""
        out, summaries, mappings = md_runs
        sharded, one = rank_weights(out, f"{model}-fsdp")[0], dict(np.load(out / f"{model}-single-rank0.npz"))
        keys = [key for mx, key in mappings[model].items() if not _is_statistic(mx)]
        diff, key = max((float(np.abs(sharded[k] - one[k]).max()), k) for k in keys)
        assert diff <= MD_ATOL, f"{model}: {key} differs by {diff:.3g}"
        warned = summaries["one"][0][f"{model}-single"]["warnings"]
        assert len(warned) == 1 and warned[0].startswith("DeviceCountWarning: the MXNet run summed the gradients "
                                                         "of 2 device(s)"), warned

    def test_unscaled_gradients_end_far_from_mxnet(self, multi_device, md_runs):
        """Control: DDP with data_parallel_size=1 (MXNet's rescale_grad as is, half the gradient MXNet applied) ends
        far from MXNet, and warns that 2 devices meet 1 rank."""
        out, summaries, mappings = md_runs
        got, mapping = rank_weights(out, "twin-ddp-unscaled")[0], mappings["twin"]
        diff = max(float(np.abs(got[key] - multi_device["final"][mx][0]).max()) for mx, key in mapping.items()
                   if not _is_statistic(mx))
        assert diff > 1e-3, f"the unscaled run still ends at MXNet's (largest difference {diff:.3g})"
        assert [w.split(":")[0] for w in summaries["two"][0]["twin-ddp-unscaled"]["warnings"]] == ["DeviceCountWarning"]
