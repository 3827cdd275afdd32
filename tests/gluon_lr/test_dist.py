"""LrTrainer on MXNet's parameter-server kvstore: a real local cluster (scheduler, servers, two workers) per test.

Each cluster runs ``tests/gluon_lr/dist_worker.py`` on 127.0.0.1 (a free port each); the fixture kills every process
group it started, whatever happens, and fails a test that left a process behind.
"""
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from tests.gluon_lr import dist_worker as W
from devtools.local_cluster import ClusterError, run_cluster

pytestmark = pytest.mark.slow

#: dist_sync sums the two workers' gradients on the server (float32); the single-process run takes the gradient of
#: the concatenated batch. They differ by rounding only; measured largest difference over 7 steps: 1.5e-8 (SGD with
#: momentum) to 3.0e-8 (Adam), with 1 or 2 servers and update_on_kvstore True or False.
ATOL_VS_SINGLE_PROCESS = 1e-6
#: How far a run that ignores the multipliers lands from the right answer (it must be far, or the test proves nothing).
MIN_DIFF_WITHOUT_MULTIPLIERS = 1e-3


@pytest.fixture
def cluster(tmp_path):
    """Run a cluster: ``cluster(*worker_args, **kw)`` -> {rank: record}; every process is gone at teardown."""
    started = []

    def run(*worker_args, out: Path = tmp_path, **kwargs):
        out.mkdir(parents=True, exist_ok=True)
        args = ["-m", "tests.gluon_lr.dist_worker", worker_args[0], str(out)] + [str(a) for a in worker_args[1:]]
        run_cluster(args, out / "logs", started=started, **kwargs)
        return {rank: dict(np.load(out / f"rank{rank}.npz")) for rank in (0, 1)}

    try:
        yield run
    finally:
        alive = [p for p in started if p.poll() is None]
        for proc in alive:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert not alive, f"{len(alive)} cluster process(es) were left running: {[p.args for p in alive]}"


def _largest_difference(got: dict, want: dict, keys) -> tuple:
    """(largest |got - want|, key) over `keys`."""
    return max((float(np.abs(got[k] - want[k]).max()), k) for k in keys)


def _reference(optimizer: str, multipliers: bool = True) -> dict:
    """The recipe in one process on both workers' batches concatenated (optionally with every multiplier 1)."""
    net = W.build_net()
    trainer = W.make_trainer(net, optimizer, "device", None)
    if not multipliers:
        trainer.set_lr_mult({name: 1.0 for name in trainer.lr_mult}, replace=True)
        trainer.set_wd_mult({name: 1.0 for name in trainer.wd_mult}, replace=True)
    return W.run_recipe(net, trainer, W.reference_batch, 2 * W.BATCH)


class TestHarness:
    """The local cluster harness fails fast and clearly, and leaves no process behind."""

    def test_dead_worker_is_named_with_its_stderr(self, cluster):
        """A worker that raises: ClusterError names that worker and shows its traceback; nothing keeps running."""
        begin = time.monotonic()
        with pytest.raises(ClusterError, match=r"(?s)role 'worker[01]' died with exit code 1.*fails on purpose"):
            cluster("crash", timeout=60)
        assert time.monotonic() - begin < 30, "a dead worker must be reported at once, not at the deadline"

    def test_dead_server_is_named(self, cluster):
        """A server that exits with code 3 while workers wait on it: ClusterError names 'server0' at once."""
        begin = time.monotonic()
        with pytest.raises(ClusterError, match=r"role 'server0' died with exit code 3"):
            cluster("server_dies", timeout=60)
        assert time.monotonic() - begin < 30, "a dead server must be reported at once, not at the deadline"

    def test_deadline_kills_everything(self, cluster):
        """Workers that hang: ClusterError at the deadline, every process killed (checked by the fixture)."""
        begin = time.monotonic()
        with pytest.raises(ClusterError, match="ran past its deadline"):
            cluster("hang", timeout=6)
        assert time.monotonic() - begin < 6 + 15


class TestMultipliersOnServers:
    """Multipliers reach the servers: stock Gluon drops them (the pitfall), LrTrainer keeps them."""

    def test_stock_trainer_ignores_lr_mult_on_dist_sync(self, cluster):
        """Stock gluon.Trainer (MXNet 1.9.1) on the servers: Parameter.lr_mult 0.5/2.0 are ignored, the same values
        set index-keyed on the optimizer before the first step hold, a later set_learning_rate(0) never arrives, and
        save_states fails.

        Per step s the summed, rescaled gradient is (2s+1)/2 for each weight element and 1 for each bias element;
        lr 0.1. After step 2, ignored: w = 1 - 0.1*(1.5+2.5) = 0.6, b = -0.2; honoured: w = 0.8, b = -0.4. Step 3
        (lr 0 on the worker, still 0.1 on the servers): w -= 0.1*mult*3.5, b -= 0.1*mult.
        """
        records = cluster("stock", "dist_sync")
        want = {"step2/a_weight": 0.6, "step2/a_bias": -0.2, "step2/b_weight": 0.8, "step2/b_bias": -0.4,
                "step3/a_weight": 0.25, "step3/a_bias": -0.3, "step3/b_weight": 0.625, "step3/b_bias": -0.6}
        for rank, record in records.items():
            for key, value in want.items():
                got = record[key]
                assert np.abs(got - value).max() <= 1e-6, \
                    f"rank {rank}: {key} is {got.ravel()[0]}, expected {value}: did MXNet's behaviour change?"
            assert "Cannot save states for distributed training" in str(record["save_error"]), \
                f"rank {rank}: stock save_states under dist_sync gave {record['save_error']!r}"

    def test_lrtrainer_dist_async_multipliers_and_change(self, cluster):
        """dist_async with LrTrainer: multipliers hold, a change made after a barrier holds for every later push, and
        an element mask (which the servers cannot apply) is refused.

        Steps 1-2 at lr 0.1 (weight x0.5, bias x2), steps 3-4 at lr 0.01 (bias x0):
        w = 1 - 0.05*(1.5+2.5) - 0.005*(3.5+4.5) = 0.76; b = -0.2*(1+1) = -0.4.
        """
        records = cluster("linear", "dist_async")
        for rank, record in records.items():
            np.testing.assert_allclose(record["step0/lin_weight"], np.full((2, 3), 0.76), atol=1e-6,
                                       err_msg=f"rank {rank}")
            np.testing.assert_allclose(record["step0/lin_bias"], np.full(2, -0.4), atol=1e-6, err_msg=f"rank {rank}")
            assert "update_on_kvstore=False" in str(record["mask_refused"]), f"rank {rank}: a mask must be refused"


RECIPES = [  # (optimizer, update_on_kvstore, servers, contexts per worker)
    ("sgd", True, 2, 1),
    ("adam", True, 1, 1),
    ("sgd", False, 1, 1),
    ("adam", True, 1, 2),
]


class TestRecipeOnDistSync:
    """dist_sync: rules, set_lr_mult, a learning-rate change, a freeze/unfreeze, as in one process."""

    @pytest.mark.parametrize("optimizer,update_on_kvstore,servers,contexts", RECIPES)
    def test_equals_single_process(self, cluster, tmp_path, optimizer, update_on_kvstore, servers, contexts):
        """Every weight after every step equals the one-process run on the concatenated batches (ATOL stated); the
        settings each worker exports record 2 workers x ``contexts`` devices."""
        records = cluster("recipe", "dist_sync", optimizer, update_on_kvstore, contexts, num_servers=servers)
        for rank in (0, 1):
            settings = json.loads((tmp_path / f"settings-rank{rank}.json").read_text())
            assert settings["num_devices"] == 2 * contexts, settings["num_devices"]
        keys = sorted(records[0])
        same, key = _largest_difference(records[0], records[1], keys)
        assert same == 0.0, f"workers disagree on {key} by {same}"
        want = _reference(optimizer)
        diff, key = _largest_difference(records[0], want, keys)
        assert diff <= ATOL_VS_SINGLE_PROCESS, f"{key}: dist vs one process differ by {diff}"
        wrong, _ = _largest_difference(_reference(optimizer, multipliers=False), want, keys)
        assert wrong > MIN_DIFF_WITHOUT_MULTIPLIERS, "the recipe's multipliers must matter for this test to prove"
        for name in ("net_d0_weight", "net_d0_bias"):  # frozen before steps 4 and 5, unfrozen before step 6
            kept = records[0][f"step5/{name}"] - records[0][f"step3/{name}"]
            assert not kept.any(), f"frozen {name} moved by {np.abs(kept).max()}"
            assert np.abs(records[0][f"step6/{name}"] - records[0][f"step5/{name}"]).max() > 1e-6

    def test_states_saved_from_two_servers_resume_on_one(self, cluster, tmp_path):
        """Step-5 states saved from 2 servers, loaded by a FRESH 1-server job: steps 6-7 are bit-identical to the
        first job's; the same file loaded by ONE process gives them too (within ATOL)."""
        first = cluster("recipe", "dist_sync", "sgd", True, num_servers=2, out=tmp_path / "first")
        resumed = cluster("resume", "dist_sync", "sgd", True, tmp_path / "first", out=tmp_path / "resumed")
        keys = [k for k in first[0] if k.startswith(("step6/", "step7/"))]
        diff, key = _largest_difference(resumed[0], first[0], keys)
        assert diff == 0.0, f"{key}: resumed run differs by {diff}"
        net = W.build_net(seed=123)
        trainer = W.make_trainer(net, "sgd", "device", None)
        W.resume(net, trainer, tmp_path / "first")
        alone = W.run_recipe(net, trainer, W.reference_batch, 2 * W.BATCH, first=6)
        diff, key = _largest_difference(alone, first[0], keys)
        assert diff <= ATOL_VS_SINGLE_PROCESS, f"{key}: one process resumed from the dist file differs by {diff}"

    def test_one_process_states_resume_on_servers(self, cluster, tmp_path):
        """States saved by ONE process at step 5, loaded by a dist job with update_on_kvstore: steps 6-7 match the
        one-process run (within ATOL)."""
        net = W.build_net()
        trainer = W.make_trainer(net, "adam", "device", None)
        alone = W.run_recipe(net, trainer, W.reference_batch, 2 * W.BATCH,
                             hook=lambda step: step == 5 and W.save_step5(net, trainer, tmp_path))
        resumed = cluster("resume", "dist_sync", "adam", True, tmp_path, out=tmp_path / "resumed")
        keys = [k for k in alone if k.startswith(("step6/", "step7/"))]
        diff, key = _largest_difference(resumed[0], alone, keys)
        assert diff <= ATOL_VS_SINGLE_PROCESS, f"{key}: dist resumed from a one-process file differs by {diff}"


# ------------------------------------------------------------------------------ in one process (no cluster)
def _as_server(command):
    """What a kvstore server does with a worker's command: unpickle it (protocol 0, as MXNet sends it)."""
    import pickle
    return pickle.loads(pickle.dumps(command, 0))


def _settings(lr, lr_mult):
    return {"lr": lr, "wd": 0.01, "lr_mult": lr_mult, "wd_mult": {0: 1.0, 1: 0.0}}


def _optimizer(name: str, lr: float, lr_mult: dict):
    import mxnet as mx
    kwargs = {"learning_rate": 0.1, "wd": 0.01, "rescale_grad": 0.25, **({"momentum": 0.9} if name == "sgd" else {})}
    made = mx.optimizer.create(name, **kwargs)
    made.lr, made.lr_mult, made.wd_mult = lr, lr_mult, {0: 1.0, 1: 0.0}
    return made


def _train(updater_at) -> list:
    """4 steps on keys 0 and 1 (flat weights, as a server holds them); ``updater_at(step)`` gives the Updater."""
    import mxnet as mx
    rng = np.random.RandomState(0)
    grads = [[mx.nd.array(rng.randn(6)) for _ in range(2)] for _ in range(4)]
    weights = [mx.nd.array(np.linspace(-1, 1, 6)) for _ in range(2)]
    for step in range(4):
        updater = updater_at(step)
        for key in (0, 1):
            updater(key, grads[step][key], weights[key])
    return [w.asnumpy() for w in weights]


def _server_run(name: str) -> list:
    """As a server: install, 2 steps, an update command (lr 0.1 -> 0.02, key 1's lr_mult 1 -> 0.5), then 2 steps
    with the NEW Updater that MXNet's server builds after every command."""
    import mxnet as mx
    from gluon_lr import _dist
    live = {}

    def updater_at(step):
        if step == 0:
            live["opt"] = _as_server(_dist._Command("install", _optimizer(name, 0.1, {}),
                                                    _settings(0.1, {0: 1.0, 1: 1.0})))
            live["updater"] = mx.optimizer.Updater(live["opt"])
        if step == 2:
            again = _as_server(_dist._Command("update", _settings(0.02, {0: 1.0, 1: 0.5})))
            assert again is live["opt"], "the server must keep its live optimizer object"
            live["updater"] = mx.optimizer.Updater(again)
        return live["updater"]

    return _train(updater_at)


class TestServerCommands:
    """The commands a server runs keep the optimizer's states across the new Updater that each one brings."""

    @pytest.mark.parametrize("name", ["sgd", "adam", "rmsprop", "lamb"])
    def test_update_keeps_states_exactly(self, name):
        """Server run bit-identical to ONE Updater whose optimizer is changed in place; re-sending the optimizer
        (a fresh Updater and optimizer, what ``kvstore.set_optimizer`` does) is not."""
        import mxnet as mx
        got = _server_run(name)
        one = mx.optimizer.Updater(_optimizer(name, 0.1, {0: 1.0, 1: 1.0}))

        def in_place(step):
            if step == 2:
                one.optimizer.lr, one.optimizer.lr_mult = 0.02, {0: 1.0, 1: 0.5}
            return one

        want = _train(in_place)
        for key in (0, 1):
            diff = np.abs(got[key] - want[key]).max()
            assert diff == 0.0, f"{name}: key {key} differs by {diff}"
        before = mx.optimizer.Updater(_optimizer(name, 0.1, {0: 1.0, 1: 1.0}))
        resent = mx.optimizer.Updater(_optimizer(name, 0.02, {0: 1.0, 1: 0.5}))
        lost = _train(lambda step: before if step < 2 else resent)
        assert max(np.abs(lost[k] - want[k]).max() for k in (0, 1)) > 1e-6, "the control must lose the states"


def _write_pickle(path: Path, obj) -> Path:
    import pickle
    path.write_bytes(pickle.dumps(obj))
    return path


def _big_states(tmp: Path) -> Path:
    import mxnet as mx
    return _write_pickle(tmp / "big.states", {0: mx.nd.zeros(1_000_000)})


LOAD_ERRORS = [  # (description, make the file, DMLC_NUM_SERVER, error class name, message pattern)
    ("missing file", lambda tmp: tmp / "nope.states", "1", "StatesFileError",
     r"could not be read.*Trainer\.save_states"),
    ("corrupt bytes", lambda tmp: (tmp / "bad.states").write_bytes(b"\x80\x04garbage") and tmp / "bad.states", "1",
     "StatesFileError", r"could not be read"),
    ("a list, not states", lambda tmp: _write_pickle(tmp / "list.states", [1, 2]), "1", "StatesFileError",
     r"holds a list, expected the dict of optimizer states"),
    ("array sliced over servers", _big_states, "2", "DistributedError", r"keys \[0\].*MXNET_KVSTORE_BIGARRAY_BOUND"),
]


class TestServerStatesErrors:
    """Bad states files and impossible saves raise gluon_lr's own errors on the worker, before any server is told."""

    @pytest.mark.parametrize("description,make,servers,error,pattern", LOAD_ERRORS, ids=[e[0] for e in LOAD_ERRORS])
    def test_load_errors(self, tmp_path, monkeypatch, description, make, servers, error, pattern):
        """Each bad file raises the named error (a ValueError) with a message that says what to do."""
        import gluon_lr
        from gluon_lr import _dist
        monkeypatch.setenv("DMLC_NUM_SERVER", servers)
        path = make(tmp_path)
        error_class = getattr(gluon_lr, error, None) or getattr(_dist, error)
        with pytest.raises(error_class, match=pattern) as caught:
            _dist._ServerStatesKVStore.load_optimizer_states(object(), str(path))
        assert isinstance(caught.value, ValueError)

    @pytest.mark.parametrize("description,parts,pattern", [
        ("a server wrote nothing", 0, r"0 of 1 kvstore servers wrote their states.*writable by every server"),
        ("a key on two servers", 2, r"keys \[0\] are sliced over several servers"),
    ])
    def test_merge_errors(self, tmp_path, monkeypatch, description, parts, pattern):
        """Saving: a missing server part, or one key in two parts, raises DistributedError naming the fix."""
        import mxnet as mx
        from gluon_lr import _dist
        monkeypatch.setenv("DMLC_NUM_SERVER", str(max(parts, 1)))
        files = [str(_write_pickle(tmp_path / f"p{i}.part", ({0: mx.nd.zeros(3)}, mx.optimizer.SGD())))
                 for i in range(parts)]
        with pytest.raises(_dist.DistributedError, match=pattern):
            _dist._merge_parts(files, str(tmp_path / "out.states"))
