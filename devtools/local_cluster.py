"""Launch local multi-process jobs on 127.0.0.1 for tests: an MXNet parameter-server cluster, or torch DDP ranks.

Each role is a separate process started with the DMLC_* environment, as MXNet's ``tools/launch.py`` does for
``--launcher local``, talking over 127.0.0.1 only, with a root port picked free for each cluster. Every process has its
own process group; whatever happens (a role dies, the deadline passes, the test is interrupted), every group is killed
before :func:`run_processes` returns or raises.

A worker that fails must exit at once (``os._exit(1)`` after printing its traceback): a Python exception alone leaves
the process hanging in the kvstore's finalizer, and the failure would only show at the deadline.
"""
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
_SERVER_CODE = "import mxnet"  # a server or scheduler runs its loop while mxnet is imported, then exits


class ClusterError(RuntimeError):
    """A role of the local cluster died, failed or ran past the deadline."""


@dataclass
class _Role:
    name: str
    proc: subprocess.Popen
    out_path: Path
    err_path: Path

    def tail(self, n_chars: int = 3000) -> str:
        """Return the last characters of this role's stderr (then stdout)."""
        text = self.err_path.read_text(errors="replace") + self.out_path.read_text(errors="replace")
        return text[-n_chars:]


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _base_env(port: int, num_servers: int, num_workers: int, extra: dict) -> dict:
    env = dict(os.environ)
    env.update({
        "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(port), "DMLC_NODE_HOST": "127.0.0.1",
        "DMLC_NUM_SERVER": str(num_servers), "DMLC_NUM_WORKER": str(num_workers),
        "OMP_NUM_THREADS": "1", "MXNET_CPU_WORKER_NTHREADS": "1", "PS_VERBOSE": "0",
        "PYTHONPATH": os.pathsep.join([str(_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    })
    env.update({key: str(value) for key, value in extra.items()})
    return env


def _start(name: str, argv: list, env: dict, log_dir: Path) -> _Role:
    out_path, err_path = log_dir / f"{name}.out", log_dir / f"{name}.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, cwd=str(_ROOT), start_new_session=True)
    return _Role(name, proc, out_path, err_path)


def _kill_all(roles: list) -> None:
    for role in roles:
        if role.proc.poll() is None:
            try:
                os.killpg(role.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for role in roles:
        try:
            role.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _failure(roles: list, why: str) -> ClusterError:
    lines = [why]
    for role in roles:
        code = role.proc.poll()
        lines.append(f"--- {role.name} (exit code {code}) stderr/stdout tail:\n{role.tail()}")
    return ClusterError("\n".join(lines))


def _wait(roles: list, workers: list, deadline: float) -> None:
    while True:
        for role in roles:
            code = role.proc.poll()
            if code not in (None, 0):
                raise _failure([role] + [r for r in roles if r is not role], f"role '{role.name}' died "
                               f"with exit code {code} before the workers finished")
        if all(w.proc.poll() == 0 for w in workers):
            return
        if time.monotonic() > deadline:
            raise _failure(roles, "the local cluster ran past its deadline; every process was killed")
        time.sleep(0.05)


def run_processes(specs: list, log_dir: Path, timeout: float = 60.0, started: list = None) -> list:
    """Start processes, wait for the 'main' ones, then for the rest to exit; kill everything on any failure.

    Args:
        specs: ``(name, argv, env, main)`` per process, in start order; the call returns when every ``main``
            process has exited with 0 and every other one (a scheduler, a server) has exited with 0 after them.
        log_dir: folder for each process's ``{name}.out``/``{name}.err``.
        timeout: hard deadline in seconds for all of them together.
        started: if given, every ``subprocess.Popen`` started is appended to it.

    Returns:
        The stdout text of each main process, in start order.

    Raises:
        ClusterError: a process died or failed, or the deadline passed; names it and shows its stderr tail.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    started = [] if started is None else started
    roles, mains = [], []
    try:
        for name, argv, env, main in specs:
            roles.append(_start(name, argv, env, log_dir))
            started.append(roles[-1].proc)
            if main:
                mains.append(roles[-1])
        deadline = time.monotonic() + timeout
        _wait(roles, mains, deadline)
        for role in roles:  # a scheduler and servers exit once every worker has finalized
            role.proc.wait(timeout=max(1.0, min(15.0, deadline - time.monotonic())))
            if role.proc.returncode != 0:
                raise _failure([role], f"role '{role.name}' exited with code {role.proc.returncode}")
        return [m.out_path.read_text() for m in mains]
    except subprocess.TimeoutExpired as err:
        raise _failure(roles, f"a role did not exit after the workers finished: {err}") from None
    finally:
        _kill_all(roles)


def run_cluster(worker_args: list, log_dir: Path, num_servers: int = 1, num_workers: int = 2,
                timeout: float = 60.0, env: dict = None, started: list = None) -> list:
    """Run an MXNet kvstore cluster: one scheduler, `num_servers` servers, `num_workers` workers on 127.0.0.1.

    Args:
        worker_args: arguments after ``python`` for every worker (the worker reads its rank from the kvstore).
        log_dir: folder for each role's stdout/stderr files.
        num_servers: number of server processes.
        num_workers: number of worker processes.
        timeout: hard deadline in seconds for the whole cluster.
        env: extra environment variables for every role (e.g. ``MXNET_KVSTORE_BIGARRAY_BOUND``).
        started: if given, every ``subprocess.Popen`` started is appended to it (a fixture can check that none is
            left alive, and kill any that is).

    Returns:
        The stdout text of each worker, in start order (process names, not kvstore ranks).

    Raises:
        ClusterError: a role died or failed, or the deadline passed; names the role and shows its stderr tail.
    """
    base = _base_env(free_port(), num_servers, num_workers, env or {})
    server = [sys.executable, "-c", _SERVER_CODE]
    specs = [("scheduler", server, {**base, "DMLC_ROLE": "scheduler"}, False)]
    specs += [(f"server{i}", server, {**base, "DMLC_ROLE": "server"}, False) for i in range(num_servers)]
    specs += [(f"worker{i}", [sys.executable] + list(worker_args), {**base, "DMLC_ROLE": "worker"}, True)
              for i in range(num_workers)]
    return run_processes(specs, log_dir, timeout, started)


def run_torch_ddp(worker_args: list, log_dir: Path, world_size: int = 2, timeout: float = 60.0,
                  started: list = None, python: str = None) -> list:
    """Run `world_size` torch.distributed processes (env:// rendezvous on 127.0.0.1, a free port).

    Each process gets ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK``, as ``torchrun``
    sets them; use ``torch.distributed.init_process_group("gloo")`` on CPU (``devtools.torch_ranks.init_gloo``).

    Args:
        worker_args: arguments after ``python`` for every process.
        log_dir: folder for each process's stdout/stderr files.
        world_size: number of processes.
        timeout: hard deadline in seconds.
        started: if given, every ``subprocess.Popen`` started is appended to it.
        python: the interpreter (./.venv-torch's for the environment without MXNet); None: this one.

    Returns:
        The stdout text of each process, by rank.

    Raises:
        ClusterError: a process died or failed, or the deadline passed; names it and shows its stderr tail.
    """
    base = _base_env(free_port(), 0, world_size, {})
    base.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(world_size),
                 "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"})
    specs = [(f"rank{r}", [python or sys.executable] + list(worker_args),
              {**base, "RANK": str(r), "LOCAL_RANK": str(r)}, True) for r in range(world_size)]
    return run_processes(specs, log_dir, timeout, started)
