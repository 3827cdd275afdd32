"""save_states / load_states: optimizer states AND the multiplier table, by parameter name, across processes."""
import json
import os
import subprocess
import sys
import textwrap

import mxnet as mx
import pytest

from gluon_lr import LrTrainer, Rule
from tests.gluon_lr.conftest import assert_close, build_mlp, train_step, weights

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent('''
    import json, sys
    import mxnet as mx
    from gluon_lr import LrTrainer, Rule
    from tests.gluon_lr.conftest import build_mlp, train_step
    mode, folder = sys.argv[1], sys.argv[2]
    net = build_mlp()
    trainer = LrTrainer(net, "adam", {"learning_rate": 0.05}, rules=[Rule("mlp_dense1_*", lr_mult=0.5)])
    if mode == "save":
        trainer.set_lr_mult({"mlp_dense0_weight": 0.2})
        trainer.set_wd_mult({"mlp_dense0_bias": 0.0})
        for step in range(3):
            train_step(net, trainer, [mx.cpu()], seed=step)
        trainer.save_states(folder + "/t.states")
        net.save_parameters(folder + "/t.params")
    else:
        net.load_parameters(folder + "/t.params")
        trainer.load_states(folder + "/t.states")
    train_step(net, trainer, [mx.cpu()], seed=3)
    net.save_parameters(folder + "/" + mode + "-after.params")
    print(json.dumps({"lr_mult": dict(trainer.lr_mult), "wd_mult": dict(trainer.wd_mult)}))
''')


def _run(mode, folder):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(folder)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _load(path):
    return {k: v.asnumpy().astype("float64") for k, v in mx.nd.load(str(path)).items()}


class TestFreshProcess:
    def test_round_trip(self, tmp_path):
        """A fresh process that loads the states gets the table back and takes the same next Adam step."""
        saved = _run("save", tmp_path)
        loaded = _run("load", tmp_path)
        assert loaded == saved
        assert (loaded["lr_mult"]["mlp_dense0_weight"], loaded["wd_mult"]["mlp_dense0_bias"]) == (0.2, 0.0)
        assert_close(_load(tmp_path / "load-after.params"), _load(tmp_path / "save-after.params"), atol=1e-7,
                     what="step after load_states")


def _adam(params, **kwargs):
    return LrTrainer(params, "adam", {"learning_rate": 0.05}, **kwargs)


class TestByName:
    def test_other_order_gets_own_state(self, tmp_path):
        """States are matched by name: a trainer listing the parameters in reverse order steps identically."""
        net = build_mlp()
        trainer = _adam(net, rules=[Rule("mlp_dense0_*", lr_mult=0.3)])
        for step in range(2):
            train_step(net, trainer, [mx.cpu()], seed=step)
        trainer.save_states(tmp_path / "t.states")
        start = weights(net)
        train_step(net, trainer, [mx.cpu()], seed=2)
        expected = weights(net)
        for name, param in net.collect_params().items():
            param.set_data(mx.nd.array(start[name]))
        params = net.collect_params()
        reverse = _adam([params[k] for k in sorted(params.keys(), reverse=True)])
        assert reverse.load_states(tmp_path / "t.states") == []
        assert reverse.lr_mult["mlp_dense0_weight"] == 0.3 and reverse.explain().to_dict()[
            "mlp_dense0_weight"]["lr_source"] == "load_states"
        train_step(net, reverse, [mx.cpu()], seed=2)
        assert_close(weights(net), expected, atol=1e-7, what="reverse-order trainer")

    def test_missing_names_reported(self, tmp_path):
        """Names in the file that the trainer lacks are returned and warned about."""
        net = build_mlp()
        trainer = _adam(net)
        train_step(net, trainer, [mx.cpu()])
        trainer.save_states(tmp_path / "t.states")
        subset = _adam(net[0].collect_params())
        with pytest.warns(UserWarning, match="not in this trainer"):
            missing = subset.load_states(tmp_path / "t.states")
        assert sorted(missing) == sorted(set(trainer.lr_mult) - set(subset.lr_mult)) and len(missing) == 6

    @pytest.mark.parametrize("update_on_kvstore", [True, False])
    def test_kvstore_round_trip(self, tmp_path, update_on_kvstore):
        """With two contexts and a device kvstore (update on kvstore or not) the table survives a reload."""
        ctxs = [mx.cpu(0), mx.cpu(1)]
        net = build_mlp(ctx=ctxs)
        trainer = _adam(net, kvstore="device", update_on_kvstore=update_on_kvstore)
        trainer.set_lr_mult({"mlp_dense1_weight": 0.0})
        train_step(net, trainer, ctxs)
        trainer.save_states(tmp_path / "t.states")
        fresh = _adam(build_mlp(ctx=ctxs), kvstore="device", update_on_kvstore=update_on_kvstore)
        fresh.load_states(tmp_path / "t.states")
        assert fresh.lr_mult["mlp_dense1_weight"] == 0.0
        names = list(fresh.lr_mult)
        assert fresh.optimizer.lr_mult[names.index("mlp_dense1_weight")] == 0.0
        assert fresh.optimizer.param_dict[names.index("mlp_dense1_weight")].lr_mult == 0.0
        assert fresh.optimizer.num_update == 1
