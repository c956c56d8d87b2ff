"""Run folders: ``DIR/run.json``, ``DIR/trace/*.parquet``, ``DIR/metrics.json``,
``DIR/report.html`` (+ ``DIR/figures/``).

A run folder is written whole into a hidden sibling and renamed into place, so a reader
never sees a half-written result: either the complete folder is there or nothing is. The
rename never takes what it must not:

* without ``--force`` it goes only where nothing is, or an empty folder: of two runs
  started into one ``--out``, the second to finish is refused (renaming a folder onto a
  folder that holds anything fails), and the first one's folder stays as it was;
* ``--force`` replaces a previous run folder — one that holds only what xferlab writes in
  a run folder — in one step (``renameat2(RENAME_EXCHANGE)`` where the file system has it),
  never a folder that holds anything else, nor the current folder, a folder that holds
  it, the home folder or ``/``;
* a symbolic link as ``--out`` is followed (the link stays, its target is written);
* a Ctrl-C while the folder is put in place is held until that is done, so that no
  staging folder is left behind (:class:`Interrupted` says the folder was written).

Reading one refuses what is damaged with the file at fault: :func:`load_trace` checks
run.json and every table against the contract (:meth:`Trace.validate`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fnmatch
import json
import math
import os
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from . import datafile, limits
from .trace import RUN_JSON, TRACE_DIR, Trace, TraceError

RUN_FILE = RUN_JSON
METRICS_FILE = "metrics.json"
REPORT_FILE = "report.html"
FIGURES_DIR = "figures"
#: What xferlab writes in a run folder: the engine, ``xferlab report``, the ssh backend's
#: logs (``Trace.files``), ``xferlab compare``'s default page, and the temporary files of an
#: atomic write that a killed process left. ``--force`` replaces a folder of these only.
WRITTEN = frozenset({RUN_FILE, METRICS_FILE, REPORT_FILE, TRACE_DIR, FIGURES_DIR, "logs"})
WRITTEN_PATTERNS = ("compare-*.html", ".*.tmp-*")

#: Failures of the machine rather than of what the user gave (exit status 1).
_ENVIRONMENT = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG}
_ENVIRONMENT |= {errno.ENOMEM, errno.EMFILE, errno.ENFILE, errno.ETXTBSY, errno.EBUSY, errno.EXDEV}


class RunFolderError(Exception):
    """A run folder or an --out that cannot be used as given: the user's input (exit status 2)."""

    exit_status = 2


class MachineRefusal(RunFolderError):
    """The machine refused a read or a write (permission, a read-only or full disk): exit status 1."""

    exit_status = 1


class Interrupted(KeyboardInterrupt):
    """A Ctrl-C that came while a run folder was put in place: the folder is whole."""


def os_failure(path: Path, e: OSError, doing: str = "cannot write") -> RunFolderError:
    """The refusal for ``e`` met at ``path`` (which the message names), of the right kind."""
    what = {
        errno.EISDIR: "it is a folder where xferlab writes a file",
        errno.ENOTDIR: "a part of the path is a file where a folder belongs",
        errno.EEXIST: "it exists and is not a folder",
        errno.ENAMETOOLONG: "a name in the path is too long",
        errno.ELOOP: "too many levels of symbolic links",
    }.get(e.errno, e.strerror or str(e))
    kind = MachineRefusal if e.errno in _ENVIRONMENT else RunFolderError
    if e.errno == errno.ENOENT and path.parent.is_dir():  # /proc, /sys: a folder that takes no new file
        what, kind = f"{path.parent} takes no new files", MachineRefusal
    return kind(f"{path}: {doing}: {what}")


@contextlib.contextmanager
def writing(path: Path, doing: str = "cannot write") -> Iterator[None]:
    """Turns an OSError of the writes inside into the refusal that names the file at fault
    (``e.filename2`` for a rename: its destination)."""
    try:
        yield
    except OSError as e:
        at = e.filename2 or e.filename
        hidden = at is not None and Path(at).name.startswith(".")  # our temporary file: name the real one
        raise os_failure(Path(at) if at and not hidden else path, e, doing) from None


def write_bytes(path: Path, data: bytes) -> None:
    """Writes ``data`` atomically (a temporary file beside, renamed): the old file stays whole
    until the new one is; what was there (a FIFO, a link) is replaced, never written through;
    nothing is left behind on any failure or Ctrl-C."""
    path = Path(path)
    tmp = None
    try:
        with writing(path):
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:200]}.tmp-", dir=path.parent)
            os.fchmod(fd, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
            tmp = None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def write_text(path: Path, text: str) -> None:
    """Writes ``text`` (UTF-8) atomically, as :func:`write_bytes`."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, data) -> None:
    """Writes JSON atomically (see :func:`write_text`)."""
    write_text(path, json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n")


def own_folder(path: Path) -> Path:
    """``path`` as a folder of the run's own to write into (created when missing): a symbolic
    link there would lead the writes into someone else's folder, and is refused."""
    with writing(path):
        path.mkdir(exist_ok=True)
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise RunFolderError(f"{path}: a symbolic link where xferlab writes a folder of its own; remove it")
    return path


def _finite(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"{text} is not a finite number")
    return x


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def read_json(path: Path, max_bytes: int = int(limits.RUN_FILE_MAX_BYTES.value)):
    """The data of a JSON file xferlab wrote, or :class:`RunFolderError` naming the file and
    what is wrong with it (missing, a folder, not UTF-8, not JSON, NaN, nested too deeply)."""
    try:
        text = datafile.read_text(path, "JSON file", max_bytes)
    except datafile.DataFileError as e:
        kind = MachineRefusal if e.errno in _ENVIRONMENT else RunFolderError
        raise kind(str(e)) from None
    try:
        return json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise RunFolderError(f"{path}: not valid JSON ({e})") from None
    except ValueError as e:
        raise RunFolderError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise RunFolderError(f"{path}: nested too deeply to be a file of xferlab") from None


def is_run_folder(path: Path) -> bool:
    return (path / RUN_FILE).is_file() and (path / TRACE_DIR).is_dir()


# ----------------------------------------------------------------------------- destinations


def _entries(folder: Path) -> list[str]:
    with writing(folder, "cannot read"):
        return sorted(os.listdir(folder))


def foreign_entries(folder: Path) -> list[str]:
    """What ``folder`` holds that xferlab does not write in a run folder."""
    return [n for n in _entries(folder) if n not in WRITTEN and not any(fnmatch.fnmatch(n, p) for p in WRITTEN_PATTERNS)]


def _protected(real: Path) -> str | None:
    """Why ``real`` (a resolved path) must never be replaced, or None."""
    try:
        real, cwd = real.resolve(), Path.cwd().resolve()
    except FileNotFoundError:  # the current folder removed under us: nothing to protect there
        real, cwd = real.absolute(), None
    except (RuntimeError, OSError) as e:  # a loop of links (Python < 3.13 says it as RuntimeError)
        raise RunFolderError(f"{real}: cannot use this folder: {e}") from None
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError):  # no HOME and no password entry
        home = None
    if real == Path(real.anchor):
        return "is the root folder"
    if real == cwd:
        return "is the current folder"
    if cwd is not None and real in cwd.parents:
        return "holds the current folder"
    if real == home:
        return "is the home folder"
    return None


def _replaceable(out: Path, real: Path) -> None:
    """Refuses to replace ``real`` unless it is a previous run folder and nothing else."""
    why = _protected(real)
    if why:
        raise RunFolderError(f"{out} {why}; a run folder is created whole by a rename: choose a new folder for --out")
    foreign = foreign_entries(real)
    if foreign or not (real / RUN_FILE).is_file():
        held = ", ".join(foreign[:5]) + (" …" if len(foreign) > 5 else "")
        what = f"it holds {held}" if foreign else f"it has no {RUN_FILE}"
        raise RunFolderError(
            f"{out} is not a run folder ({what}); --force replaces only a previous run folder: choose another --out"
        )


def _target(out: Path) -> Path:
    """``out`` made absolute, a symbolic link at its end followed (the link stays, the folder
    it names is written); a dangling link or a loop is refused."""
    try:
        out_abs = Path(os.path.abspath(out))  # "" and "." are the current folder
    except FileNotFoundError:
        raise RunFolderError(f"{out}: the current folder no longer exists") from None
    try:
        if not out_abs.is_symlink():
            return out_abs
        return out_abs.resolve(strict=True)
    except FileNotFoundError:
        raise RunFolderError(f"{out} is a dangling symbolic link; remove it or choose another --out") from None
    except RuntimeError:  # Python < 3.13 says a loop this way
        raise RunFolderError(f"{out}: a loop of symbolic links") from None
    except OSError as e:
        raise os_failure(out, e, "cannot use this folder") from None


def check_destination(out: Path, force: bool) -> Path:
    """Refuses, before any work, a destination the run must not take (see the module), or
    that cannot be written: its parent folders are created and a staging folder is tried.
    Returns the folder that will be written (a link at the end of ``out`` followed)."""
    real = _target(out)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise os_failure(out, e, "cannot use this folder") from None
    why = _protected(real)
    if why:
        raise RunFolderError(f"{out} {why}; a run folder is created whole by a rename: choose a new folder for --out")
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            raise RunFolderError(f"{out} exists and is not a folder; choose another --out")
        if _entries(real):
            if not force:
                raise RunFolderError(f"{out} already exists; choose another --out or pass --force to replace a previous run")
            _replaceable(out, real)
    _probe(out, real)
    return real


def _probe(out: Path, real: Path) -> None:
    parent = real.parent
    probe = None
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe = tempfile.mkdtemp(prefix=f".{real.name[:200]}.probe-", dir=parent)
    except OSError as e:
        if e.errno in (errno.EEXIST, errno.ENOTDIR):
            blocker = next((a for a in [parent, *parent.parents] if a.exists() and not a.is_dir()), parent)
            raise RunFolderError(f"{out}: {blocker} is a file, not a folder") from None
        raise os_failure(Path(out), e, "cannot write there") from None
    finally:
        if probe is not None:
            os.rmdir(probe)


@contextlib.contextmanager
def staged(out: Path, force: bool = False) -> Iterator[Path]:
    """Yields a temporary folder; on success it takes the place of ``out`` in one rename (see
    the module for what it may replace). Nothing of it is left on a failure or a Ctrl-C."""
    real = check_destination(out, force)
    tmp = None
    try:
        with writing(real.parent, f"cannot write {out} there"):
            tmp = Path(tempfile.mkdtemp(prefix=f".{real.name[:200]}.tmp-", dir=real.parent))
            os.chmod(tmp, 0o755)
        yield tmp
        with _sigint_held():
            _commit(tmp, real, out, force)
    finally:
        if tmp is not None and os.path.lexists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def _commit(tmp: Path, real: Path, out: Path, force: bool) -> None:
    """Puts ``tmp`` in the place of ``real``; with ``force``, what was there ends in ``tmp``."""
    try:
        os.rename(tmp, real)  # onto nothing or an empty folder; refused onto anything else
        return
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise os_failure(out, e) from None
    if not force:
        raise RunFolderError(
            f"{out} was created by another run while this one ran; it is left as it was and this run's "
            "result is discarded: run again with another --out"
        )
    _replaceable(out, real)  # again, at the last moment
    with writing(out):
        if _exchange(tmp, real):
            shutil.rmtree(tmp, ignore_errors=True)  # the previous run
            return
        aside = Path(tempfile.mkdtemp(prefix=f".{real.name[:200]}.tmp-", dir=real.parent))
        os.rename(real, aside / "previous")  # no RENAME_EXCHANGE here: the previous run aside, then the new in
        try:
            os.rename(tmp, real)
        finally:
            if not os.path.lexists(real):
                os.rename(aside / "previous", real)
            shutil.rmtree(aside, ignore_errors=True)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)


def _exchange(a: Path, b: Path) -> bool:
    """Swaps ``a`` and ``b`` atomically (Linux renameat2); False where that is not available."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT held back while a folder is put in place; one that came meanwhile is raised
    after, as :class:`Interrupted` (the folder is whole)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        pending = signal.SIGINT in signal.sigpending()
        if pending:
            signal.sigtimedwait({signal.SIGINT}, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    if pending:
        raise Interrupted()


# ----------------------------------------------------------------------------- reading


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; a folder we may not look into is said so, not taken as empty."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise os_failure(path, e, "cannot read") from None
    return True


def load_trace(folder: Path) -> Trace:
    """The Trace of a run folder (upgraded from an older version when needed), checked against
    the contract: a damaged folder is a :class:`RunFolderError` naming the file at fault."""
    folder = Path(folder)
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        raise RunFolderError(f"{folder}: no such folder") from None
    except OSError as e:
        raise os_failure(folder, e, "cannot read") from None
    if not stat.S_ISDIR(st.st_mode):
        raise RunFolderError(f"{folder}: not a folder; expected a run folder")
    if not _exists(folder / RUN_FILE) or not _exists(folder / TRACE_DIR):
        raise RunFolderError(f"{folder}: not a run folder (no {RUN_FILE} and {TRACE_DIR}/)")
    run_meta = read_json(folder / RUN_FILE)
    if not isinstance(run_meta, dict):
        raise RunFolderError(f"{folder / RUN_FILE}: not a run.json of xferlab (a {type(run_meta).__name__}, not a mapping)")
    try:
        return Trace.read(folder / TRACE_DIR, run_meta).validate()
    except TraceError as e:
        if e.file:
            raise RunFolderError(f"{folder / e.file}: {e.detail}") from None
        raise RunFolderError(f"{folder}: {e}") from None
