"""Reading an input file: only a regular file is opened (a FIFO or a device would block or never end)."""
import os
import stat

__all__ = ["read_regular_file"]


def read_regular_file(path, error, what: str) -> bytes:
    """The bytes of the regular file at ``path``; anything else is refused before it is opened.

    Args:
        path: The file.
        error: The exception class to raise.
        what: What the file should be, for messages (e.g. "the file LrTrainer.save_states wrote").

    Raises:
        error: the path is missing, unreadable, or not a regular file (a folder, FIFO, socket or device).

    Example:
        >>> data = read_regular_file("trainer.states", StatesFileError, "the file LrTrainer.save_states wrote")
    """
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise error(f"Expected a path to {what}, got {type(path).__name__} {path!r:.60}; pass the file's path.")
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
                    "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "not a regular file")
            raise error(f"Cannot read {os.fsdecode(path)!r}: it is {kind}, not a regular file; pass {what}.")
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise error(f"Cannot read {os.fsdecode(path)!r}: {exc.strerror}; pass {what}.") from None
