"""Writing outputs atomically (temp file in the same folder + ``os.replace``) and fingerprinting inputs."""
import hashlib
import json
import os
import tempfile


def atomic_write(path, write) -> None:
    """Call ``write(temp_path)`` for a temp file next to ``path``, then move it onto ``path`` in one step.

    Args:
        path: Destination file; its folder must exist.
        write: A callable that writes the whole file at the path it is given.
    """
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".tmp-migrate-")
    os.close(fd)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path, document) -> None:
    """Write ``document`` as indented JSON, atomically."""
    text = json.dumps(document, indent=1, allow_nan=False) + "\n"
    atomic_write(path, lambda tmp: _write_text(tmp, text))


def write_text(path, text: str) -> None:
    """Write ``text`` (UTF-8), atomically."""
    atomic_write(path, lambda tmp: _write_text(tmp, text))


def torch_save(obj, path) -> None:
    """``torch.save(obj, path)``, atomically."""
    import io

    import torch
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    data = buffer.getvalue()
    atomic_write(path, lambda tmp: _write_bytes(tmp, data))


def sha256(path) -> str:
    """The SHA-256 hex digest of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_text(path, text):
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)


def _write_bytes(path, data):
    with open(path, "wb") as out:
        out.write(data)
