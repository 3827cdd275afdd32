"""`python -m migrate map` end to end on files in tmp_path: outputs, --json, exit codes 0/1/2."""
import json
import os
import subprocess
import sys

import mxnet as mx
import pytest

from migrate import NameMapping
from tests.migrate import models as M

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """MxResidual exported as symbol + params files."""
    folder = tmp_path_factory.mktemp("cli")
    net = M.gluon(M.MxResidual)
    net.hybridize()
    net(mx.nd.zeros((1, 3, 8, 8)))
    net.export(str(folder / "res"))
    return folder


def _run(folder, *extra, torch_spec="tests.migrate.models:torch_residual", out="mapping.json"):
    args = [sys.executable, "-m", "migrate", "map", "--symbol", str(folder / "res-symbol.json"),
            "--params", str(folder / "res-0000.params"), "--torch", torch_spec, "--input-shape", "1,3,8,8",
            "--out", str(folder / out), *extra]
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "2"}
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


class TestMapCommand:
    """The map subcommand."""

    def test_equivalent_model_exits_0(self, exported):
        """Mapped and verified: exit 0, the file loads, --json prints one document with schema_version."""
        done = _run(exported, "--json")
        assert done.returncode == 0, done.stderr[-2000:]
        mapping = NameMapping.load(exported / "mapping.json")
        assert mapping.ok and mapping["body1_weight"] == "conv1.weight"
        doc = json.loads(done.stdout)
        assert doc["schema_version"] == 1 and doc["ok"] is True
        assert doc["verify"]["max_abs_diff"] <= 1e-5
        assert doc["mapping"]["entries"]["short_weight"] == "short.0.weight"
        assert "wrote" in done.stderr

    def test_not_equivalent_exits_1(self, exported):
        """A torch model with the stride on the second conv: exit 1, tables on stdout name the differences."""
        done = _run(exported, "--kwargs", '{"stride1": 1, "stride2": 2}', out="m3.json")
        assert done.returncode == 1, done.stderr[-2000:]
        assert "MXNet Conv 'body1_weight' vs torch Conv 'conv1.weight': strides (2, 2) vs (1, 1)" in done.stdout
        assert "first divergence: MXNet 'body1_fwd' vs torch 'conv1'" in done.stdout
        assert NameMapping.load(exported / "m3.json").ok is False

    def test_module_class_as_factory(self, exported):
        """--torch may name a torch.nn.Module class (it was refused as 'None, not a model factory'): the class is
        built with --kwargs and maps as the factory does."""
        done = _run(exported, "--json", torch_spec="tests.migrate.models:TorchResidual", out="m-class.json")
        assert done.returncode == 0, done.stderr[-2000:]
        mapping = NameMapping.load(exported / "m-class.json")
        assert mapping.ok and mapping["body1_weight"] == "conv1.weight"
        assert json.loads(done.stdout)["verify"]["max_abs_diff"] <= 1e-5


USAGE_ERRORS = [
    ("bad torch spec", ("--torch", "tests.migrate.models"), "expected package.module:callable"),
    ("unknown callable", ("--torch", "tests.migrate.models:nope"), "cannot import it"),
    ("bad kwargs", ("--kwargs", "[1]"), "expected a JSON object"),
    ("bad shape", ("--input-shape", "1,x"), "comma-separated integers"),
    ("missing params file", ("--params", "absent.params"), "--params 'absent.params': file not found"),
    ("missing flag", ("--out",), ""),
]


@pytest.mark.parametrize("desc,extra,pattern", USAGE_ERRORS, ids=[e[0] for e in USAGE_ERRORS])
def test_usage_errors_exit_2(exported, capsys, desc, extra, pattern):
    """Usage and input errors return 2 with a message on stderr naming the flag, and write nothing."""
    from migrate.cli import main
    args = {"--symbol": str(exported / "res-symbol.json"), "--params": str(exported / "res-0000.params"),
            "--torch": "tests.migrate.models:torch_residual", "--input-shape": "1,3,8,8",
            "--out": str(exported / "usage.json")}
    if len(extra) == 2:
        args[extra[0]] = extra[1]
    else:
        del args[extra[0]]
    assert main(["map", *[x for kv in args.items() for x in kv]]) == 2
    err = capsys.readouterr().err
    assert pattern in err and "Traceback" not in err
    assert not (exported / "usage.json").exists()


def test_no_command_prints_the_usage_and_exits_2():
    """`migrate` alone prints the usage on stderr, every subcommand on one line with its help, and exits 2 (as
    argparse, git and pip do)."""
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, "-m", "migrate"], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and done.stdout == "" and lines[0].startswith("usage: migrate")
    commands = ("map", "groups", "weights", "optim", "verify", "all", "check", "generate", "data")
    found = {line.split()[0]: line for line in lines if line.startswith("    ") and line.split()[0] in commands}
    assert sorted(found) == sorted(commands), done.stderr
    assert found["check"].rstrip().endswith("name the first difference and its likely cause"), found["check"]
