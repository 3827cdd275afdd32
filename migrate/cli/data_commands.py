"""``migrate data``: MXNet RecordIO datasets, without MXNet.

``migrate data convert --rec X.rec [--idx X.idx] --out DIR [--format folder|tar]`` writes every record as an image
folder (``ImageFolder`` layout when the labels are classes) or WebDataset-style tar shards (``migrate.data.convert``);
``migrate data index --rec X.rec --out X.idx`` scans a ``.rec`` once and writes the ``.idx`` MXNet's
``MXIndexedRecordIO`` and ``migrate.data.RecordFile`` read. Errors (a broken ``.rec``, an existing output) exit 2
through the command's report.
"""
from __future__ import annotations

import os
import sys

from migrate.cli import inputs
from migrate.data.convert import FORMATS, convert_records
from migrate.data.record_file import RecordFile
from migrate.errors import CliUsageError

__all__ = ["add_parser", "run"]

_REC_HELP = "the MXNet RecordIO file (im2rec, MXRecordIO)"
_IDX_HELP = "its .idx (im2rec, MXIndexedRecordIO): the keys name the files; without it, record numbers"


def add_parser(sub) -> None:
    """Add ``data`` and its actions to the ``migrate`` subcommands ``sub``."""
    what = "MXNet RecordIO datasets without MXNet: convert a .rec to images or tar shards, or write its .idx"
    data = sub.add_parser("data", help=what, description=what)
    actions = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    convert = actions.add_parser("convert", help="every record to an image folder or tar shards",
                                 description="Write every record of a .rec as an image folder (ImageFolder layout "
                                 "when the labels are classes) or WebDataset-style tar shards, with manifest.json "
                                 "and records.jsonl (key, file, label, id, id2 per record).")
    convert.add_argument("--rec", required=True, metavar="FILE", help=_REC_HELP)
    convert.add_argument("--idx", metavar="FILE", help=_IDX_HELP)
    convert.add_argument("--out", dest="data_out", required=True, metavar="FOLDER",
                         help="output folder: built under a temporary name beside it and renamed when complete")
    convert.add_argument("--format", dest="data_format", choices=FORMATS, default="folder",
                         help="folder (default: the image files as stored) or tar (shards)")
    convert.add_argument("--per-shard", type=int, default=1000, metavar="N", help="records per tar shard (1000)")
    index = actions.add_parser("index", help="write the .idx of a .rec (one scan)",
                               description="Scan a .rec once and write its .idx: keys 0..n-1 (record numbers in file "
                               "order) and byte offsets, as MXIndexedRecordIO reads them.")
    index.add_argument("--rec", required=True, metavar="FILE", help=_REC_HELP)
    index.add_argument("--out", dest="data_out", required=True, metavar="FILE", help=".idx file to write")
    for action in (convert, index):
        action.add_argument("--force", action="store_true", help="replace an existing output")
        action.add_argument("--json", action="store_true", help="print one JSON document instead of text")
        action.add_argument("--quiet", action="store_true", help="no progress bar on stderr")


def run(opts, report) -> None:
    """Run ``migrate data <action>`` (``opts``: its ``DataOptions``), recording what it did in ``report``."""
    {"convert": _convert, "index": _index}[opts.action](opts, report)


def _convert(opts, report) -> None:
    rec = inputs.existing_file("--rec", opts.rec, _REC_HELP)
    idx = opts.idx and inputs.existing_file("--idx", opts.idx, "the .idx written with the .rec")
    if opts.per_shard < 1:
        raise CliUsageError(f"--per-shard {opts.per_shard}: expected a positive number of records per tar shard")
    from tqdm import tqdm
    with tqdm(desc="migrate data convert", unit="record", file=sys.stderr, disable=not opts.bars,
              leave=False) as bar:
        done = convert_records(rec, opts.out, idx, opts.data_format, opts.per_shard, opts.force,
                               progress=lambda n: bar.update(n - bar.n))
    report.sections["data"] = {"action": "convert", "rec": rec, "idx": idx, **vars(done)}
    shape = {"classes": f"{done.classes} class folders (ImageFolder layout)", "flat": "images/ (labels in "
             "records.jsonl)", "shards": f"{done.shards} tar shards"}[done.layout]
    report.text.append(f"converted {done.records} records of {rec} into {done.out}: {shape}"
                       + (f"; {done.not_images} payloads in no known image format, written as .bin"
                          if done.not_images else ""))
    report.outputs.append(done.out)


def _index(opts, report) -> None:
    rec = inputs.existing_file("--rec", opts.rec, _REC_HELP)
    inputs.output_paths([opts.out], {"--rec": rec}, opts.force)
    records = RecordFile(rec)
    records.write_index(opts.out)
    report.sections["data"] = {"action": "index", "rec": rec, "records": len(records),
                               "out": os.path.abspath(opts.out)}
    report.text.append(f"indexed {len(records)} records of {rec}: keys 0..{len(records) - 1} (record numbers in file "
                       f"order) with their byte offsets")
    report.outputs.append(opts.out)
