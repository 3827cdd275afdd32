"""Writing files atomically (temp file in the same folder + ``os.replace``) and fingerprinting inputs.

The one writer of the project: gluon_lr's settings and states files, migrate's outputs and the tutorials' tables all
go through ``atomic_write``, so a reader never sees half a file and an interrupted write leaves the old file.
"""
import hashlib
import json
import os
import re
import shutil
import tempfile

__all__ = ["atomic_write", "write_json", "write_text", "sha256", "process_running", "temp_prefix", "remove_stale",
           "usual_mode"]

TEMP_PREFIX = ".tmp-"
#: This project's temporary names that carry their process's id: ``.tmp-<pid>-`` (atomic writes),
#: ``.tmp-gluon-lr-<pid>-`` (gluon_lr's scratch folders), ``.tmp-data-<pid>-`` (``migrate data convert`` before it
#: staged its folder as ``migrate all`` does).
_TEMP_NAME = re.compile(r"\.tmp-(?:gluon-lr-|data-)?(\d+)-")


def temp_prefix(kind: str = "") -> str:
    """The prefix of this process's temporary names: ``.tmp-<pid>-`` (files) or ``.tmp-<kind>-<pid>-`` (folders).

    The pid lets a later run tell a dead process's leftovers (``remove_stale``) from a live one's.
    """
    return f"{TEMP_PREFIX}{kind + '-' if kind else ''}{os.getpid()}-"


def usual_mode(folder: bool = False) -> int:
    """The permissions a new file (0666) or folder (0777) gets from this process's umask: what every output is given,
    where a temporary one was made private (``mkstemp``'s 0600, ``mkdtemp``'s 0700).

    Examples:
        >>> oct(usual_mode())  # under umask 022
        '0o644'
    """
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if folder else 0o666) & ~umask


def process_running(pid: int) -> bool:
    """True when a process with this id exists.

    Examples:
        >>> process_running(os.getpid())
        True
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid > 0
    return True


def remove_stale(folder) -> list:
    """Remove the temporary files and folders that processes no longer running left in ``folder`` (kill -9).

    Returns:
        The paths removed.

    Examples:
        >>> remove_stale("checkpoints")
        []
    """
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        match = _TEMP_NAME.match(name)
        if not match or process_running(int(match.group(1))):
            continue
        path = os.path.join(folder, name)
        try:
            shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
            removed.append(path)
        except OSError:
            pass
    return removed


def atomic_write(path, content, *, error=None) -> None:
    """Write ``content`` to ``path`` atomically: a temp file in the same folder, then ``os.replace``.

    The file gets the usual permissions (0666 minus the umask), not the temp file's 0600.

    Args:
        path: Destination file; its folder must exist.
        content: The bytes to write, or a callable that writes the whole file at the path it is given.
        error: Exception class raised (naming the folder and the fix) when the folder is missing or not
            writable; None lets the ``OSError`` through.

    Raises:
        error: the folder does not exist or is not writable.

    Examples:
        >>> atomic_write("notes.txt", b"hello")
        >>> atomic_write("model.pt", lambda tmp: torch.save(obj, tmp))  # doctest: +SKIP
    """
    if not isinstance(path, (str, os.PathLike)):
        problem = f"Cannot write to {path!r}: a path is needed, got {type(path).__name__}; pass a file path."
        raise (error or TypeError)(problem)
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not path:
        raise (error or FileNotFoundError)("Cannot write to '': an empty path; pass a file path such as 'out/name'.")
    if os.path.isdir(path) or path.endswith((os.sep, "/")):
        problem = (f"Cannot write {path!r}: it is a folder path; pass a file path inside it (e.g. "
                   f"{os.path.join(path, 'name')!r}, the folder created first).")
        raise (error or IsADirectoryError)(problem)
    remove_stale(folder)
    try:
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(), dir=folder)
    except OSError as exc:
        if error is None:
            raise
        raise error(f"Cannot write {path!r}: folder {folder!r} is not writable ({exc.strerror}); create it "
                    f"or choose another path.") from None
    try:
        if callable(content):
            os.close(fd)
            content(tmp)
        else:
            with os.fdopen(fd, "wb") as out:
                out.write(content)
        os.chmod(tmp, usual_mode())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path, document, *, error=None) -> None:
    """Write ``document`` as indented JSON (NaN and infinity refused), atomically (see ``atomic_write``).

    Examples:
        >>> write_json("settings.json", {"format": "gluon-lr-settings"})
    """
    write_text(path, json.dumps(document, indent=1, allow_nan=False) + "\n", error=error)


def write_text(path, text: str, *, error=None) -> None:
    """Write ``text`` as UTF-8, atomically (see ``atomic_write``).

    Examples:
        >>> write_text("report.txt", "ok\\n")
    """
    atomic_write(path, text.encode("utf-8"), error=error)


def sha256(path) -> str:
    """The SHA-256 hex digest of the file at ``path``.

    Examples:
        >>> len(sha256("settings.json"))
        64
    """
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
