"""An all-or-nothing output folder (``migrate all``'s, ``migrate data convert``'s): built under a temporary name
beside ``--out``, then put in place in one rename.

Interrupted at any point (Ctrl-C, SIGTERM, kill -9, a crash), ``--out`` is either absent or the previous complete
folder: with ``--force`` the old folder is swapped out only once the new one is complete (``renameat2`` with
``RENAME_EXCHANGE`` on Linux; elsewhere two renames, the old folder kept as ``<temp>.previous`` in between and put
back by the next run if the process died there). Temporary folders are named
``.tmp-migrate-<out name, 40 characters at most>-<pid>-<random>``; those of a process that no longer runs are removed
by the next run into the same parent folder, whatever ``--out`` name they were for (with the temporary files of
atomic writes that dead processes left: ``mxformats.atomic.remove_stale``); those of a running process are left
alone.

Two runs into the same ``--out`` at once never mix: a new folder is put in place only where nothing is
(``RENAME_NOREPLACE``), so the run that comes second fails with ``OutputExistsError`` (or, with ``--force``, swaps
in its own complete folder whole).

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

from mxformats.atomic import process_running, remove_stale, temp_prefix, usual_mode
from mxformats.reading import special_kind
from migrate.errors import OutputExistsError, OutputPathError

__all__ = ["StagedFolder", "pause_point", "remove_leftovers", "writable_folder", "PAUSE_VARIABLE", "STAGING_PREFIX"]

STAGING_PREFIX = ".tmp-migrate-"
PAUSE_VARIABLE = "MIGRATE_PAUSE_AT"
_PREVIOUS = ".previous"
_STEM_CHARACTERS = 40
#: ``.tmp-migrate-<out name>-<pid>-<random>[.previous]`` (mkdtemp's random part holds no '-').
_STAGING = re.compile(rf"{re.escape(STAGING_PREFIX)}(?P<name>.*)-(?P<pid>\d+)-[A-Za-z0-9_]+(?P<previous>"
                      rf"{re.escape(_PREVIOUS)})?")
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2
_AT_FDCWD = -100


def pause_point(stage: str) -> None:
    """Sleep at ``stage`` when ``MIGRATE_PAUSE_AT`` names it (fault tests interrupt the command there)."""
    if os.environ.get(PAUSE_VARIABLE) == stage:
        print(f"migrate: paused at {stage}", file=sys.stderr, flush=True)
        time.sleep(float(os.environ.get("MIGRATE_PAUSE_SECONDS", "60")))


def writable_folder(folder: str, flag: str) -> None:
    """OutputPathError unless ``folder`` exists, is a folder, and a file can be created in it (read-only mounts
    and permissions included), checked before any work starts.

    Examples:
        >>> writable_folder("/tmp", "--out")
    """
    if not os.path.isdir(folder):
        what = special_kind(folder) or ("a regular file" if os.path.isfile(folder) else "does not exist")
        raise OutputPathError(f"{flag}: folder {folder!r} {what if what == 'does not exist' else 'is ' + what}; "
                              f"create it (mkdir -p) or choose another output path")
    try:
        probe = tempfile.NamedTemporaryFile(prefix=".tmp-migrate-probe-", dir=folder)
    except OSError as exc:
        raise OutputPathError(f"{flag}: folder {folder!r} is not writable ({exc.strerror}); choose a folder you can "
                              f"write to, or change its permissions") from None
    probe.close()


class StagedFolder:
    """A folder written under a temporary name and renamed to ``target`` by ``commit``; removed if never committed.

    Args:
        target: The folder to produce (``--out``).
        names: The file names the command writes there; an existing ``target`` may hold only these
            (``foreign`` says which it holds beyond them: a subclass whose files have other names overrides it).
        force: Replace an existing ``target`` that holds some of them.
        writer: The command, as messages name it.

    Examples:
        >>> with StagedFolder("migrated", ["report.txt"], force=False) as stage:  # doctest: +SKIP
        ...     atomic.write_text(stage.file("report.txt"), "ok")
        ...     stage.commit()
    """

    def __init__(self, target, names, force: bool, writer: str = "migrate all"):
        self.given = os.fspath(target)
        self.target = os.path.abspath(self.given)
        self.parent, self.name = os.path.split(self.target)
        self._stem = STAGING_PREFIX + self.name[:_STEM_CHARACTERS]  # temporary names stay within NAME_MAX (255 bytes)
        self.names, self.force, self.writer = tuple(names), force, writer
        self.path, self.committed = None, False

    def foreign(self, present: list) -> list:
        """The entries of an existing ``target`` this command does not write (the folder is replaced as a whole)."""
        return [entry for entry in present if entry not in self.names]

    def check(self) -> None:
        """Refuse, before any work, an empty path, a target that is a file, holds foreign files, exists without
        --force or cannot be replaced (not writable, immutable); and a parent folder that is missing or not writable.
        Cleans up after dead runs first (``remove_leftovers``)."""
        if not self.given.strip():
            raise OutputPathError(f"--out {self.given!r}: an empty path; give the folder to create, such as ./migrated "
                                  f"(an empty --out would name the current folder)")
        if not self.name or self.name in (".", "..") or len(os.fsencode(self.name)) > 255:
            raise OutputPathError(f"--out {self.target[-300:]!r}: give a folder path with a name of 1 to 255 bytes, "
                                  f"such as ./migrated")
        if os.path.islink(self.target):
            raise OutputPathError(f"--out {self.target!r}: is a symbolic link; give the folder's real path (the "
                                  f"folder is replaced as a whole)")
        if os.path.lexists(self.target) and not os.path.isdir(self.target):
            raise OutputExistsError(f"--out {self.target!r}: exists and is not a folder; give a folder path")
        writable_folder(self.parent, "--out")
        remove_leftovers(self.target, own=False)
        present = sorted(os.listdir(self.target)) if os.path.isdir(self.target) else []
        fixed = [path for path in [self.target] + [os.path.join(self.target, p) for p in present]
                 if os.path.lexists(path) and not os.access(path, os.W_OK, follow_symlinks=False)]
        if fixed:
            raise OutputPathError(f"--out {self.target!r}: {fixed[0]!r} cannot be replaced (not writable, or "
                                  f"immutable: lsattr shows 'i'); choose another --out, or make it writable (chmod "
                                  f"u+w, chattr -i)")
        foreign = self.foreign(present)
        if foreign:
            listed = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise OutputExistsError(f"--out {self.target!r} holds files `{self.writer}` does not write ({listed}); "
                                    f"the folder is replaced as a whole, so give a new or empty folder, or move those "
                                    f"files out")
        if present and not self.force:
            raise OutputExistsError(f"--out: {os.path.join(self.target, present[0])!r} exists; pass --force to "
                                    f"replace the folder {self.target!r} once the new one is complete, or choose "
                                    f"another output path")

    def file(self, name: str) -> str:
        """The path where ``name`` is written while the folder is staged."""
        return os.path.join(self.path, name)

    def __enter__(self) -> "StagedFolder":
        self.path = tempfile.mkdtemp(prefix=f"{self._stem}-{os.getpid()}-", dir=self.parent)
        os.chmod(self.path, usual_mode(folder=True))  # a normal folder once renamed, not mkdtemp's 0700
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
        """Put the staged folder at ``target`` in one step (the old one, if any, is removed afterwards).

        Raises:
            OutputExistsError: another run put a folder at ``target`` meanwhile and --force was not given (that
                folder is left whole).
            OutputPathError: the system refused the rename (names --out and the fix).
        """
        pause_point("before-rename")
        try:
            if not self._put_in_place():
                raise OutputExistsError(f"--out {self.target!r}: another run wrote this folder while this one worked "
                                        f"(it is complete and was left as it is); pass --force to replace it, or "
                                        f"choose another --out")
        except OSError as exc:
            raise OutputPathError(f"--out {self.target!r}: cannot put the new folder in place ({exc.strerror or exc});"
                                  f" choose another --out, or make its folder writable (nothing was changed)") from None
        self.committed = True
        pause_point("after-rename")

    def _put_in_place(self) -> bool:
        """Rename the staged folder to ``target``; False when a non-empty folder is there and --force was not given."""
        if not os.path.lexists(self.target) and _rename_noreplace(self.path, self.target):
            return True
        if not self.force and os.path.isdir(self.target) and os.listdir(self.target):
            return False  # a folder another run completed meanwhile: never replaced without --force
        if not _exchange(self.path, self.target):
            os.rename(self.target, self.path + _PREVIOUS)
            os.rename(self.path, self.target)
        return True

def _in_use(pid: int) -> bool:
    """True when another running process owns a temporary folder (this process's own are leftovers)."""
    return pid != os.getpid() and process_running(pid)


def remove_leftovers(out, own: bool = True) -> list:
    """Remove, in the folder that holds ``out``, the staged folders of runs that died (whatever --out name they were
    for) and this process's own (called before a run stages, or once its outcome is decided: nothing of ours is being
    written then), and the temporary files dead processes' atomic writes left (``remove_stale``); with ``own``, this
    process's temporary files of atomic writes too. A previous complete folder set aside (``.previous``) is put back
    where its folder is missing, else removed; one whose folder cannot be told (another --out's name cut at 40
    characters) is left.

    Args:
        out: The ``--out`` path (a folder for ``all``, a file for the other subcommands).
        own: Remove this process's temporary files too (``Interrupts.finish``); False at the start of a run.

    Returns:
        The paths removed or put back.

    Examples:
        >>> remove_leftovers("/data/runs/migrated")  # doctest: +SKIP
        []
    """
    target = os.path.abspath(os.fspath(out))
    parent = os.path.dirname(target)
    done = remove_stale(parent)
    try:
        entries = os.listdir(parent)
    except OSError:
        return done
    for entry in entries:
        path = os.path.join(parent, entry)
        if own and entry.startswith(temp_prefix()) and os.path.isfile(path):
            _remove(path, done)  # an atomic write of ours cut short
            continue
        match = _STAGING.fullmatch(entry)
        if not match or not os.path.isdir(path) or os.path.islink(path):
            continue
        if _in_use(int(match["pid"])):
            continue
        if match["previous"]:
            _restore_previous(path, parent, match["name"], target, done)
        else:
            _remove(path, done)
    return done


def _restore_previous(path: str, parent: str, name: str, target: str, done: list) -> None:
    """A previous complete folder set aside between two renames: back to its folder if missing, else removed."""
    folder = target if os.path.basename(target)[:_STEM_CHARACTERS] == name else (
        os.path.join(parent, name) if len(name) < _STEM_CHARACTERS else None)
    if folder is None:
        return  # its --out name was cut: which folder it was is unknown, so it is kept
    if os.path.lexists(folder):
        _remove(path, done)
    else:
        os.rename(path, folder)
        done.append(folder)


def _remove(path: str, done: list) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.remove(path)
        except OSError:
            return
    done.append(path)


def _rename_noreplace(source: str, target: str) -> bool:
    """Rename ``source`` to ``target`` unless something is there (Linux ``renameat2(RENAME_NOREPLACE)``, atomic);
    False when something is. Where the system has no such call, a plain rename (which fails on a non-empty folder)."""
    result = _renameat2(source, target, _RENAME_NOREPLACE)
    if result is None:
        try:
            os.rename(source, target)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                return False
            raise
        return True
    if result == 0:
        return True
    if result in (errno.EEXIST, errno.ENOTEMPTY):
        return False
    raise OSError(result, os.strerror(result), target)


def _renameat2(source: str, target: str, flags: int):
    """``renameat2``'s errno (0 on success), or None where the system has no such call or refuses the flag."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    if renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flags) == 0:
        return 0
    code = ctypes.get_errno()
    return None if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP) else code


def _exchange(source: str, target: str) -> bool:
    """Swap two folders atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False when the system cannot."""
    result = _renameat2(source, target, _RENAME_EXCHANGE)
    if result is None:
        return False
    if result:
        raise OSError(result, os.strerror(result), target)
    return True
