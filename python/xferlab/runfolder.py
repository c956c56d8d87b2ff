"""Run folders: ``DIR/run.json``, ``DIR/trace/*.parquet``, ``DIR/metrics.json``,
``DIR/report.html`` (+ ``DIR/figures/``).

A run folder is written whole into a hidden sibling and renamed into place, so a reader
never sees a half-written result: either the complete folder is there or nothing is.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from .trace import Trace, TraceError

RUN_FILE = "run.json"
METRICS_FILE = "metrics.json"
REPORT_FILE = "report.html"


class RunFolderError(Exception):
    pass


def is_run_folder(path: Path) -> bool:
    return (path / RUN_FILE).is_file() and (path / "trace").is_dir()


def write_json(path: Path, data) -> None:
    """Writes JSON atomically (temporary file + rename)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n")
    os.replace(tmp, path)


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RunFolderError(f"{path}: missing") from None
    except json.JSONDecodeError as e:
        raise RunFolderError(f"{path}: not valid JSON ({e})") from None


def check_destination(out: Path, force: bool) -> None:
    """Refuses, before any work, a destination that exists (without ``force``) or that
    cannot be written: its parent folders are created and a staging folder is tried."""
    try:
        if out.exists() and not force:
            if out.is_dir() and not any(out.iterdir()):
                return _probe(out)
            raise RunFolderError(f"{out} already exists; choose another --out or pass --force to replace it")
        if out.exists() and not out.is_dir():
            raise RunFolderError(f"{out} exists and is not a folder")
        if out.is_symlink():
            raise RunFolderError(f"{out} is a dangling symbolic link; remove it or choose another --out")
    except OSError as e:
        raise RunFolderError(f"{out}: cannot use this folder: {e.strerror or e}") from None
    _probe(out)


def _probe(out: Path) -> None:
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe = parent / f".{out.name}.probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError as e:
        if e.errno in (errno.EEXIST, errno.ENOTDIR):
            blocker = next((a for a in [parent, *parent.parents] if a.exists() and not a.is_dir()), parent)
            raise RunFolderError(f"{out}: {blocker} is a file, not a folder") from None
        where = e.filename or parent
        raise RunFolderError(f"{out}: cannot write there ({where}: {e.strerror or e})") from None


@contextlib.contextmanager
def staged(out: Path, force: bool = False) -> Iterator[Path]:
    """Yields a temporary folder; on success it replaces ``out`` in one rename."""
    out = out.absolute()
    check_destination(out, force)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
    except OSError as e:
        raise RunFolderError(f"{out}: cannot write there ({e.strerror or e})") from None
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def load_trace(folder: Path) -> Trace:
    """The Trace of a run folder (upgraded from an older version when needed)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RunFolderError(f"{folder}: no such folder")
    if not is_run_folder(folder):
        raise RunFolderError(f"{folder}: not a run folder (no run.json and trace/)")
    run_meta = read_json(folder / RUN_FILE)
    if not isinstance(run_meta, dict) or "resolved" not in run_meta:
        raise RunFolderError(f"{folder}: run.json is not from xferlab")
    try:
        return Trace.read(folder / "trace", run_meta)
    except (FileNotFoundError, OSError, pa.ArrowInvalid, TraceError) as e:
        raise RunFolderError(f"{folder}: unreadable trace: {e}") from None
