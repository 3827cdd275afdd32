"""Leaving the RecordIO format: a ``.rec`` written out as a plain image folder or as tar shards.

Layouts (each with ``manifest.json``, what was written, and ``records.jsonl``, one line per record: key, file, flag,
label, id, id2):

- ``folder``: the payloads as they are (no re-encoding), ``<class>/<key>.<ext>`` when every label is a
  non-negative integer (torchvision's ``ImageFolder`` layout; class folders zero-padded so that their sorted order is
  the numeric one, and ``ImageFolder`` gives back the same class numbers), else ``images/<key>.<ext>``;
- ``tar``: ``shard-000000.tar``, ... (WebDataset's convention: ``<key>.<ext>`` with ``<key>.json``, the header, and
  ``<key>.cls``, the class, when the label is a non-negative integer), ``per_shard`` records each.

The output is built under a temporary name beside ``out`` and put in place in one rename when complete, as
``migrate all`` builds its folder (``migrate.staged_folder``): interrupted, killed or failed, ``out`` is absent or
the previous complete export; the next conversion into the same folder removes what a killed one left; two
conversions into one ``out`` at once never mix (the second refuses, or with ``force`` swaps in its own whole export).
"""
from __future__ import annotations

import io
import json
import os
import re
import tarfile
from dataclasses import dataclass

import numpy as np

from mxformats import atomic
from migrate.data.header import RecordHeader
from migrate.data.images import image_format
from migrate.data.record_file import RecordFile
from migrate.errors import ArgumentError, RecordIOError
from migrate.staged_folder import StagedFolder, pause_point

__all__ = ["Conversion", "FORMATS", "convert_records"]

FORMATS = ("folder", "tar")
MANIFEST = "manifest.json"
RECORDS = "records.jsonl"
_MANIFEST_FORMAT = "gluon-lr-recordio-export"
_MANIFEST_VERSION = 2  # 2: the conversion's format under "output_format" (1 let it overwrite "format")
_SAFE_KEY = re.compile(r"-?[A-Za-z0-9_][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class Conversion:
    """What ``convert_records`` wrote.

    Attributes:
        out: The output folder.
        format: ``folder`` or ``tar``.
        layout: ``classes`` (``<class>/<key>.<ext>``), ``flat`` (``images/<key>.<ext>``) or ``shards``.
        records: Records written (every record of the source).
        classes: The number of class folders (``classes`` layout), else 0.
        shards: The number of tar files (``tar``), else 0.
        not_images: Payloads in no known image format, written as ``.bin``.
    """

    out: str
    format: str
    layout: str
    records: int
    classes: int
    shards: int
    not_images: int


def convert_records(path, out, idx=None, format: str = "folder", per_shard: int = 1000, force: bool = False,
                    key_type=int, progress=None) -> Conversion:
    """Write every record of a ``.rec`` as a plain image folder or tar shards (module docstring: the layouts).

    Args:
        path: The ``.rec`` file.
        out: The output folder; it must not exist, or be empty, or (with ``force``) hold an earlier export.
        idx: Its ``.idx`` (the keys name the files), or None (record numbers).
        format: ``folder`` or ``tar``.
        per_shard: Records per tar file.
        force: Replace an earlier export at ``out`` (one with this module's ``manifest.json``) once the new one is
            complete (also one another conversion put there meanwhile).
        key_type: The ``.idx`` keys' type.
        progress: Called with the number of records written so far, or None.

    Returns:
        What was written.

    Raises:
        RecordIOError: the source is broken (names the file and offset), or a key cannot be a file name.
        OutputExistsError: ``out`` holds files and ``force`` is not given, holds files that are no export, is a file,
            or another conversion completed it meanwhile (without ``force``; that export is left whole).
        OutputPathError: ``out``'s parent folder is missing or not writable, ``out`` is a symbolic link or no name.

    Examples:
        >>> convert_records("train.rec", "train_images", idx="train.idx").layout  # doctest: +SKIP
        'classes'
    """
    if format not in FORMATS or not isinstance(per_shard, int) or isinstance(per_shard, bool) or per_shard < 1:
        raise ArgumentError(f"convert_records: format must be one of {FORMATS} and per_shard an integer >= 1, got "
                            f"{format!r:.40} and {per_shard!r:.40}")
    folder = _ExportFolder(out, force)
    folder.check()
    records = RecordFile(path, idx, key_type=key_type)
    with folder:
        pause_point("staged")
        writer = _TarWriter(folder.path, per_shard) if format == "tar" else _FolderWriter(folder.path)
        lines, not_images = [], 0
        for done, key in enumerate(records.in_file_order(), start=1):
            header, payload = records.unpacked(key)
            ext = image_format(payload) or "bin"
            not_images += ext == "bin"
            name = writer.add(_file_stem(records, key), ext, header, payload)
            lines.append({"key": key, "file": name, "flag": header.flag, "label": _jsonable(header.label),
                          "id": header.id, "id2": header.id2})
            if progress is not None:
                progress(done)
        layout, classes, shards = writer.finish(lines)
        conversion = Conversion(folder.target, format, layout, len(lines), classes, shards, not_images)
        atomic.write_text(folder.file(RECORDS), "".join(json.dumps(line) + "\n" for line in lines))
        atomic.write_json(folder.file(MANIFEST), _manifest(conversion, path, idx))
        folder.commit()
    return conversion


def _manifest(conversion: Conversion, path, idx) -> dict:
    """``manifest.json``: the export's tag and version, its source, and what ``Conversion`` says was written."""
    written = {("output_format" if k == "format" else k): v for k, v in vars(conversion).items() if k != "out"}
    return {"format": _MANIFEST_FORMAT, "schema_version": _MANIFEST_VERSION,
            "source": {"rec": os.path.abspath(path), "idx": idx and os.path.abspath(idx)}, **written}


class _ExportFolder(StagedFolder):
    """The staged output folder of a conversion: an existing one may be replaced only when it is an export (it holds
    ``manifest.json``), whatever files that export holds."""

    def __init__(self, out, force: bool):
        super().__init__(out, (MANIFEST,), force, writer="migrate data convert")

    def foreign(self, present: list) -> list:
        return [] if MANIFEST in present else present


def _file_stem(records: RecordFile, key) -> str:
    """The key as a file name stem; RecordIOError for a key that cannot be one."""
    stem = str(key)
    if not _SAFE_KEY.fullmatch(stem) or len(stem) > 200:
        raise RecordIOError(f"{records.where(key)}: key {stem[:80]!r} cannot name a file (letters, digits, '_' and "
                            f"'-' only, 200 at most); convert without the .idx to name the files by record number",
                            records.path, records.offset(key))
    return stem


def _jsonable(label):
    return label.tolist() if isinstance(label, np.ndarray) else label


def _class_of(label) -> int | None:
    """The label as a class number when it is a non-negative integer (a number label), else None."""
    if isinstance(label, float) and label >= 0 and label.is_integer():
        return int(label)
    return None


class _FolderWriter:
    """``images/<key>.<ext>`` while writing; ``finish`` moves them into class folders when every label is a class."""

    def __init__(self, stage: str):
        self.stage, self.flat = stage, os.path.join(stage, "images")
        os.mkdir(self.flat)

    def add(self, stem: str, ext: str, header: RecordHeader, payload: bytes) -> str:
        name = f"{stem}.{ext}"
        with open(os.path.join(self.flat, name), "xb") as handle:
            handle.write(payload)
        return f"images/{name}"

    def finish(self, lines: list) -> tuple[str, int, int]:
        classes = [_class_of(line["label"]) for line in lines]
        if not lines or any(c is None for c in classes):
            return "flat", 0, 0
        width = len(str(max(classes)))
        for line, number in zip(lines, classes):
            folder = f"{number:0{width}d}"
            os.makedirs(os.path.join(self.stage, folder), exist_ok=True)
            name = line["file"].split("/", 1)[1]
            os.rename(os.path.join(self.flat, name), os.path.join(self.stage, folder, name))
            line["file"] = f"{folder}/{name}"
        os.rmdir(self.flat)
        return "classes", len(set(classes)), 0


class _TarWriter:
    """WebDataset-style shards: ``<key>.<ext>``, ``<key>.json`` and (for a class label) ``<key>.cls``."""

    def __init__(self, stage: str, per_shard: int):
        self.stage, self.per_shard, self.count, self.tar = stage, per_shard, 0, None

    def add(self, stem: str, ext: str, header: RecordHeader, payload: bytes) -> str:
        if self.count % self.per_shard == 0:
            self._close()
            self.name = f"shard-{self.count // self.per_shard:06d}.tar"
            self.tar = tarfile.open(os.path.join(self.stage, self.name), "x", format=tarfile.USTAR_FORMAT)
        self.count += 1
        meta = {"flag": header.flag, "label": _jsonable(header.label), "id": header.id, "id2": header.id2}
        members = [(f"{stem}.{ext}", payload), (f"{stem}.json", json.dumps(meta).encode())]
        if _class_of(header.label) is not None:
            members.append((f"{stem}.cls", str(_class_of(header.label)).encode()))
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            self.tar.addfile(info, io.BytesIO(data))
        return f"{self.name}:{stem}.{ext}"

    def _close(self) -> None:
        if self.tar is not None:
            self.tar.close()
            self.tar = None

    def finish(self, lines: list) -> tuple[str, int, int]:
        self._close()
        return "shards", 0, -(-self.count // self.per_shard)
