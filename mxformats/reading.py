"""Reading an input file: only a regular file is opened (a FIFO or a device would block or never end)."""
import os
import stat

__all__ = ["read_regular_file", "special_kind"]

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(path):
    """What an existing path that is not a regular file is ("a folder", "a FIFO (named pipe)", ...), read without
    opening it; None for a regular file or when nothing is there.

    Examples:
        >>> special_kind("/tmp")
        'a folder'
    """
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError, TypeError):
        return None
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular_file(path, error, what: str) -> bytes:
    """The bytes of the regular file at ``path``; anything else is refused before it is opened.

    Args:
        path: The file.
        error: The exception class to raise.
        what: What the file should be, for messages (e.g. "the file LrTrainer.save_states wrote").

    Raises:
        error: the path is missing, unreadable, or not a regular file (a folder, FIFO, socket or device).

    Examples:
        >>> data = read_regular_file("trainer.states", StatesFileError, "the file LrTrainer.save_states wrote")
    """
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise error(f"Expected a path to {what}, got {type(path).__name__} {path!r:.60}; pass the file's path.")
    kind = special_kind(path)
    if kind is not None:
        raise error(f"Cannot read {os.fsdecode(path)!r}: it is {kind}, not a regular file; pass {what}.")
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise error(f"Cannot read {os.fsdecode(path)!r}: {exc.strerror}; pass {what}.") from None
