"""The all-or-nothing output folder of ``migrate all``: built under a temporary name beside ``--out``, then put in
place in one rename.

Interrupted at any point (Ctrl-C, SIGTERM, kill -9, a crash), ``--out`` is either absent or the previous complete
folder: with ``--force`` the old folder is swapped out only once the new one is complete (``renameat2`` with
``RENAME_EXCHANGE`` on Linux; elsewhere two renames, the old folder kept as ``<temp>.previous`` in between and put
back by the next run if the process died there). Temporary folders are named
``.tmp-migrate-<out name, 40 characters at most>-<pid>-<random>``; those of a process that no longer runs are removed
by the next run into the same parent folder, those of a running process are left alone.

``pause_point`` is the fault tests' hook: with ``MIGRATE_PAUSE_AT=<stage>`` in the environment the command prints
``migrate: paused at <stage>`` on stderr and sleeps there (``MIGRATE_PAUSE_SECONDS``, default 60) so a test can
interrupt it at a known stage.
"""
from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import sys
import tempfile
import time

from mxformats.atomic import process_running
from migrate.errors import CliUsageError, OutputExistsError
from migrate.cli.inputs import writable_folder

__all__ = ["StagedFolder", "pause_point", "PAUSE_VARIABLE", "STAGING_PREFIX"]

STAGING_PREFIX = ".tmp-migrate-"
PAUSE_VARIABLE = "MIGRATE_PAUSE_AT"
_PREVIOUS = ".previous"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def pause_point(stage: str) -> None:
    """Sleep at ``stage`` when ``MIGRATE_PAUSE_AT`` names it (fault tests interrupt the command there)."""
    if os.environ.get(PAUSE_VARIABLE) == stage:
        print(f"migrate: paused at {stage}", file=sys.stderr, flush=True)
        time.sleep(float(os.environ.get("MIGRATE_PAUSE_SECONDS", "60")))


class StagedFolder:
    """A folder written under a temporary name and renamed to ``target`` by ``commit``; removed if never committed.

    Args:
        target: The folder to produce (``--out``).
        names: The file names the command writes there; an existing ``target`` may hold only these.
        force: Replace an existing ``target`` that holds some of them.

    Example:
        >>> with StagedFolder("migrated", ["report.txt"], force=False) as stage:  # doctest: +SKIP
        ...     atomic.write_text(stage.file("report.txt"), "ok")
        ...     stage.commit()
    """

    def __init__(self, target, names, force: bool):
        self.target = os.path.abspath(os.fspath(target))
        self.parent, self.name = os.path.split(self.target)
        self._stem = STAGING_PREFIX + self.name[:40]  # temporary names stay within NAME_MAX (255 bytes)
        self.names, self.force = tuple(names), force
        self.path, self.committed = None, False

    def check(self) -> None:
        """Refuse, before any work, a target that is a file, holds foreign files, or exists without --force; and a
        parent folder that is missing or not writable. Cleans up after dead runs first (``_remove_stale``)."""
        if not self.name or self.name in (".", "..") or len(os.fsencode(self.name)) > 255:
            raise CliUsageError(f"--out {self.target[-300:]!r}: give a folder path with a name of 1 to 255 bytes, "
                                f"such as ./migrated")
        if os.path.islink(self.target):
            raise CliUsageError(f"--out {self.target!r}: is a symbolic link; give the folder's real path (the folder "
                                f"is replaced as a whole)")
        if os.path.lexists(self.target) and not os.path.isdir(self.target):
            raise CliUsageError(f"--out {self.target!r}: exists and is not a folder; give a folder path")
        writable_folder(self.parent, "--out")
        self._remove_stale()
        present = sorted(os.listdir(self.target)) if os.path.isdir(self.target) else []
        foreign = [entry for entry in present if entry not in self.names]
        if foreign:
            listed = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise CliUsageError(f"--out {self.target!r} holds files `migrate all` does not write ({listed}); the "
                                f"folder is replaced as a whole, so give a new or empty folder, or move those files "
                                f"out")
        if present and not self.force:
            raise OutputExistsError(f"--out: {os.path.join(self.target, present[0])!r} exists; pass --force to "
                                    f"replace the folder {self.target!r} once the new one is complete, or choose "
                                    f"another output path")

    def file(self, name: str) -> str:
        """The path where ``name`` is written while the folder is staged."""
        return os.path.join(self.path, name)

    def __enter__(self) -> "StagedFolder":
        self.path = tempfile.mkdtemp(prefix=f"{self._stem}-{os.getpid()}-", dir=self.parent)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.path, 0o777 & ~umask)  # a normal folder once renamed, not mkdtemp's 0700
        return self

    def __exit__(self, *exc) -> None:
        if self.path is not None and os.path.isdir(self.path):
            shutil.rmtree(self.path, ignore_errors=True)  # never committed, or the old folder swapped out
        previous = self.path and self.path + _PREVIOUS
        if previous and os.path.isdir(previous):
            if os.path.lexists(self.target):
                shutil.rmtree(previous, ignore_errors=True)
            else:
                os.rename(previous, self.target)  # interrupted between the two renames: the old folder goes back

    def commit(self) -> None:
        """Put the staged folder at ``target`` in one step (the old one, if any, is removed afterwards)."""
        pause_point("before-rename")
        if not os.path.lexists(self.target):
            os.rename(self.path, self.target)
        elif not _exchange(self.path, self.target):
            os.rename(self.target, self.path + _PREVIOUS)
            os.rename(self.path, self.target)
        self.committed = True
        pause_point("after-rename")

    def _remove_stale(self) -> None:
        """Remove the temporary folders of earlier runs into the same target whose process has died."""
        pattern = re.compile(rf"{re.escape(self._stem)}-(\d+)-[A-Za-z0-9_]+({re.escape(_PREVIOUS)})?")
        for entry in os.listdir(self.parent):
            match = pattern.fullmatch(entry)
            path = os.path.join(self.parent, entry)
            if not match or not os.path.isdir(path) or os.path.islink(path) or _in_use(int(match.group(1))):
                continue
            if match.group(2) and not os.path.lexists(self.target):
                os.rename(path, self.target)  # a previous complete folder that was never put back
            else:
                shutil.rmtree(path, ignore_errors=True)


def _in_use(pid: int) -> bool:
    """True when another running process owns a temporary folder (this process's own are leftovers)."""
    return pid != os.getpid() and process_running(pid)


def _exchange(source: str, target: str) -> bool:
    """Swap two folders atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False when the system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), target)
